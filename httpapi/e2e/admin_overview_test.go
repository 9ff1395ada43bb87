package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/admintest"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// TestAdminOverview: the overview counts the seeded orders by flow and state, lists the
// open ones by deadline with the countdown from the database clock, counts the dead letter
// and shows the lateness of a timer close in its bucket.
func TestAdminOverview(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	ctx := context.Background()
	g.SetStock(t, "SKU-1", 10)
	late := g.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 120})
	early := g.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 30})
	cancelled := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	timedOut := g.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 10})
	if _, err := g.Orders.CancelOrder(ctx, cancelled.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	g.DeadMessage(t, "k-overview")
	// The 10 s order closes 30 ms after its deadline.
	g.Clock.Set(timedOut.CloseAt.Add(30 * time.Millisecond))
	if _, err := g.Closer.CloseDue(ctx, "timer"); err != nil {
		t.Fatal(err)
	}
	now := g.Clock.Now().UTC().Truncate(time.Millisecond)

	code, v := g.Do(t, http.MethodGet, "/v1/admin/overview", admintest.Token, "")
	if code != http.StatusOK {
		t.Fatalf("overview = %d %v", code, v)
	}
	counts := map[string]float64{}
	for _, c := range v["orders_by_state"].([]any) {
		c := c.(map[string]any)
		counts[c["flow"].(string)+"/"+c["state"].(string)] = c["count"].(float64)
	}
	if len(counts) != 2 || counts["standard/pending_payment"] != 2 || counts["standard/closed"] != 2 {
		t.Errorf("orders by state = %v, want standard/pending_payment 2, standard/closed 2", counts)
	}
	dl := v["next_deadlines"].([]any)
	if len(dl) != 2 {
		t.Fatalf("next deadlines = %v, want the two open orders", dl)
	}
	for i, want := range []struct {
		id string
		at time.Time
	}{{early.ID, early.CloseAt}, {late.ID, late.CloseAt}} {
		d := dl[i].(map[string]any)
		if d["order_id"] != want.id || d["state"] != "pending_payment" || d["wake_in_ms"] != float64(want.at.Sub(now).Milliseconds()) ||
			d["close_at"] != want.at.UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("deadline %d = %v, want order %s closing at %v, wake_in_ms %d", i, d, want.id, want.at, want.at.Sub(now).Milliseconds())
		}
	}
	if ob := v["outbox"].(map[string]any); ob["dead"] != float64(1) {
		t.Errorf("outbox = %v, want 1 dead", ob)
	}
	var timer map[string]any
	for _, l := range v["close_lateness"].([]any) {
		if l := l.(map[string]any); l["trigger"] == "timer" {
			timer = l
		}
	}
	if timer == nil || timer["count"] != float64(1) || timer["sum_ms"] != float64(30) {
		t.Fatalf("timer lateness = %v, want one close, 30 ms", timer)
	}
	cum := map[float64]float64{}
	for _, b := range timer["buckets"].([]any) {
		b := b.(map[string]any)
		cum[b["le_ms"].(float64)] = b["count"].(float64)
	}
	if cum[25] != 0 || cum[50] != 1 || cum[2.5] != 0 || cum[60000] != 1 {
		t.Errorf("cumulative buckets = %v, want the close in ≤ 50 ms (none ≤ 25 ms)", cum)
	}

	for _, bad := range []string{"deadlines=0", "deadlines=1001", "deadlines=x"} {
		if code, v := g.Do(t, http.MethodGet, "/v1/admin/overview?"+bad, admintest.Token, ""); code != http.StatusUnprocessableEntity {
			t.Errorf("?%s = %d %v, want 422", bad, code, v)
		}
	}
	if code, v := g.Do(t, http.MethodGet, "/v1/admin/overview?deadlines=1", admintest.Token, ""); code != http.StatusOK ||
		len(v["next_deadlines"].([]any)) != 1 || v["next_deadlines"].([]any)[0].(map[string]any)["order_id"] != early.ID {
		t.Errorf("deadlines=1 = %d %v, want the earliest only", code, v)
	}
	if code, _ := g.Do(t, http.MethodGet, "/v1/admin/overview", "", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token = %d, want 401", code)
	}
}

// TestAdminGroups: the stuck groups are the forming ones more than a minute past their
// deadline by the database clock; state filters the others; a page continues with the
// cursor; another state is 422.
func TestAdminGroups(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	now := enginetest.Start
	group := func(id string, deadline time.Time, state orderly.GroupState) {
		g.InTx(t, func(tx store.Tx) error {
			d := &orderly.Deal{ID: "deal-" + id, SKU: "SKU-1", GroupPrice: 990, Currency: "USD", MinMembers: 2, MaxMembers: 3,
				GroupTimeLimitSeconds: 3600, MemberPaymentTimeoutSeconds: 600, CreatedAt: now.Add(-2 * time.Hour)}
			if err := tx.DealInsert(context.Background(), d); err != nil {
				return err
			}
			if err := tx.GroupInsert(context.Background(), &orderly.Group{ID: id, DealID: d.ID, State: orderly.GroupForming, LeaderUserID: "u1",
				MinMembers: 2, MaxMembers: 3, DeadlineAt: deadline, CreatedAt: now.Add(-2 * time.Hour)}); err != nil {
				return err
			}
			if state == orderly.GroupForming {
				return nil
			}
			_, err := tx.GroupSetState(context.Background(), &store.GroupSetStateParams{ID: id, From: orderly.GroupForming, To: state, At: deadline})
			return err
		})
	}
	group("g-1-stuck", now.Add(-2*time.Minute), orderly.GroupForming)
	group("g-2-late", now.Add(-30*time.Second), orderly.GroupForming) // past its deadline, within the minute
	group("g-3-ahead", now.Add(time.Hour), orderly.GroupForming)
	group("g-4-stuck", now.Add(-time.Hour), orderly.GroupForming)
	group("g-5-failed", now.Add(-time.Hour), orderly.GroupFailed)

	list := func(query string) (int, []string, string) {
		t.Helper()
		code, v := g.Do(t, http.MethodGet, "/v1/admin/groups"+query, admintest.Token, "")
		var ids []string
		gs, _ := v["groups"].([]any)
		for _, x := range gs {
			x := x.(map[string]any)
			if ms, _ := x["members"].([]any); ms == nil || len(ms) != 0 {
				t.Errorf("group %v: want members []", x)
			}
			ids = append(ids, x["id"].(string))
		}
		next, _ := v["next_cursor"].(string)
		return code, ids, next
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", []string{"g-1-stuck", "g-4-stuck"}},
		{"?state=stuck", []string{"g-1-stuck", "g-4-stuck"}},
		{"?state=forming", []string{"g-1-stuck", "g-2-late", "g-3-ahead", "g-4-stuck"}},
		{"?state=failed", []string{"g-5-failed"}},
		{"?state=succeeded", nil},
	} {
		if code, ids, _ := list(c.query); code != http.StatusOK || fmt.Sprint(ids) != fmt.Sprint(c.want) {
			t.Errorf("%q = %d %v, want %v", c.query, code, ids, c.want)
		}
	}
	code, ids, next := list("?limit=1")
	if code != http.StatusOK || fmt.Sprint(ids) != "[g-1-stuck]" || next == "" {
		t.Fatalf("first page = %d %v next %q", code, ids, next)
	}
	if code, ids, next = list("?limit=1&cursor=" + next); code != http.StatusOK || fmt.Sprint(ids) != "[g-4-stuck]" || next != "" {
		t.Errorf("second page = %d %v next %q, want [g-4-stuck], the last", code, ids, next)
	}
	if code, v := g.Do(t, http.MethodGet, "/v1/admin/groups?state=open", admintest.Token, ""); code != http.StatusUnprocessableEntity {
		t.Errorf("state=open = %d %v, want 422", code, v)
	}
}
