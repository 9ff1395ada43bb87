package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

const adminToken = "admin-test-token"

// topicCounted is the topic of the test's messages; its handler fails while failing is
// set and counts the deliveries it applied.
const topicCounted = "test.counted"

// adminEngine is the HTTP API with its admin routes on a real engine (SQLite).
type adminEngine struct {
	*enginetest.Env
	h http.Handler

	mu        sync.Mutex
	failing   bool
	delivered map[int64]int // message id → Apply calls that committed with the delivery
}

func newAdminEngine(t *testing.T) *adminEngine {
	t.Helper()
	g := &adminEngine{failing: true, delivered: map[int64]int{}}
	g.Env = enginetest.New(t, enginetest.Options{MaxAttempts: 1, Handlers: map[string]outbox.Handler{topicCounted: {
		Call: func(context.Context, *orderly.Message) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.failing {
				return errors.New("subscriber down")
			}
			return nil
		},
		Apply: func(_ context.Context, _ store.Tx, msgs []*orderly.Message) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, m := range msgs {
				g.delivered[m.ID]++
			}
			return nil
		},
	}}})
	g.h = httpapi.New(httpapi.Config{Orders: g.Orders, Payments: g.Payments, Catalog: g.Orders, CallbackSecret: engineSecret,
		AdminToken: adminToken, Admin: g.Engine.Admin()}).Handler()
	return g
}

// do sends a request with the admin token (token "" sends none) and an operator name.
func (g *adminEngine) do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(httpapi.OperatorHeader, "alice")
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, rec.Body, err)
	}
	return rec.Code, v
}

// deadMessage writes a message of topicCounted and lets its one attempt fail: it is dead.
func (g *adminEngine) deadMessage(t *testing.T, key string) int64 {
	t.Helper()
	ctx := context.Background()
	g.InTx(t, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		m, err := outbox.NewMessage(topicCounted, key, map[string]string{"key": key}, now)
		if err != nil {
			return err
		}
		return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m})
	})
	g.Drain(t)
	var dead []*orderly.Message
	g.Read(t, func(tx store.Tx) (err error) {
		dead, err = tx.OutboxDeadList(ctx, &store.OutboxFilter{Limit: 100})
		return err
	})
	for _, m := range dead {
		if m.Key == key {
			return m.ID
		}
	}
	t.Fatalf("message %s is not dead: %v", key, dead)
	return 0
}

// TestAdminUnauthorized: a real admin route answers 401 with a problem without the token
// and with a wrong one, and 200 with the right one.
func TestAdminUnauthorized(t *testing.T) {
	t.Parallel()
	g := newAdminEngine(t)
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", adminToken + "x", http.StatusUnauthorized},
		{"right token", adminToken, http.StatusOK},
	} {
		code, v := g.do(t, http.MethodGet, "/v1/admin/outbox/dead", c.token, "")
		if code != c.status {
			t.Errorf("%s: %d %v, want %d", c.name, code, v, c.status)
		}
		if c.status == http.StatusUnauthorized && v["type"] != httpapi.ProblemTypeBase+"unauthorized" {
			t.Errorf("%s: problem %v, want type unauthorized", c.name, v)
		}
	}
}

// TestAdminRedriveDeliversOnce: a dead letter listed with its attempts and error, re-driven
// over HTTP, is delivered exactly once; a second re-drive of it is 404 (no longer dead),
// and the re-drive is audited with the operator.
func TestAdminRedriveDeliversOnce(t *testing.T) {
	t.Parallel()
	g := newAdminEngine(t)
	id := g.deadMessage(t, "k-1")

	code, v := g.do(t, http.MethodGet, "/v1/admin/outbox/dead?topic="+topicCounted, adminToken, "")
	msgs, _ := v["messages"].([]any)
	if code != http.StatusOK || len(msgs) != 1 {
		t.Fatalf("dead letters = %d %v, want one", code, v)
	}
	m := msgs[0].(map[string]any)
	if m["id"] != float64(id) || m["attempts"] != float64(1) || m["last_error"] != "subscriber down" || m["key"] != "k-1" {
		t.Errorf("dead letter = %v, want id %d, 1 attempt, last_error subscriber down, key k-1", m, id)
	}

	g.mu.Lock()
	g.failing = false
	g.mu.Unlock()
	path := fmt.Sprintf("/v1/admin/outbox/dead/%d/redrive", id)
	if code, v := g.do(t, http.MethodPost, path, adminToken, ""); code != http.StatusOK || v["redriven"] != float64(1) {
		t.Fatalf("re-drive = %d %v", code, v)
	}
	g.Drain(t)
	g.Drain(t)
	g.mu.Lock()
	n := g.delivered[id]
	g.mu.Unlock()
	if n != 1 {
		t.Errorf("delivered %d times, want once", n)
	}
	if code, v := g.do(t, http.MethodPost, path, adminToken, ""); code != http.StatusNotFound {
		t.Errorf("second re-drive = %d %v, want 404", code, v)
	}
	_, v = g.do(t, http.MethodGet, fmt.Sprintf("/v1/admin/actions?target=%d", id), adminToken, "")
	acts, _ := v["actions"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["action"] != "redrive" || acts[0].(map[string]any)["operator"] != "alice" {
		t.Errorf("audit of %d = %v, want one redrive by alice", id, v)
	}
}

// TestAdminRedriveByFilter: a re-drive by topic re-drives every dead letter of the topic.
func TestAdminRedriveByFilter(t *testing.T) {
	t.Parallel()
	g := newAdminEngine(t)
	ids := []int64{g.deadMessage(t, "k-a"), g.deadMessage(t, "k-b")}
	g.mu.Lock()
	g.failing = false
	g.mu.Unlock()
	if code, v := g.do(t, http.MethodPost, "/v1/admin/outbox/dead/redrive", adminToken, `{"topic":"`+topicCounted+`"}`); code != http.StatusOK || v["redriven"] != float64(2) {
		t.Fatalf("re-drive by filter = %d %v, want 2", code, v)
	}
	g.Drain(t)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range ids {
		if g.delivered[id] != 1 {
			t.Errorf("message %d delivered %d times, want once", id, g.delivered[id])
		}
	}
}

// TestAdminDiscardAudited: a discard needs a reason; it deletes the dead letter and the
// audit keeps who, why and the message.
func TestAdminDiscardAudited(t *testing.T) {
	t.Parallel()
	g := newAdminEngine(t)
	id := g.deadMessage(t, "k-2")
	path := fmt.Sprintf("/v1/admin/outbox/dead/%d/discard", id)
	if code, v := g.do(t, http.MethodPost, path, adminToken, `{"reason":""}`); code != http.StatusUnprocessableEntity {
		t.Errorf("discard without a reason = %d %v, want 422", code, v)
	}
	if code, v := g.do(t, http.MethodPost, path, adminToken, `{"reason":"subscriber retired"}`); code != http.StatusOK || v["discarded"] != float64(id) {
		t.Fatalf("discard = %d %v", code, v)
	}
	if code, _ := g.do(t, http.MethodPost, path, adminToken, `{"reason":"again"}`); code != http.StatusNotFound {
		t.Errorf("second discard = %d, want 404", code)
	}
	if _, v := g.do(t, http.MethodGet, "/v1/admin/outbox/dead", adminToken, ""); len(v["messages"].([]any)) != 0 {
		t.Errorf("dead letters after the discard: %v", v)
	}
	_, v := g.do(t, http.MethodGet, fmt.Sprintf("/v1/admin/actions?target=%d", id), adminToken, "")
	acts, _ := v["actions"].([]any)
	if len(acts) != 1 {
		t.Fatalf("audit = %v, want one action", v)
	}
	a := acts[0].(map[string]any)
	detail, _ := a["detail"].(map[string]any)
	if a["action"] != "discard" || a["operator"] != "alice" || a["reason"] != "subscriber retired" || a["trace_id"] == "" ||
		detail["topic"] != topicCounted || detail["key"] != "k-2" {
		t.Errorf("audit row = %v, want discard by alice, the reason, a trace id and the message", a)
	}
}

// TestAdminSearchOrders pages through a user's orders with the cursor, filters by state,
// and reads one order's history and reconciliation.
func TestAdminSearchOrders(t *testing.T) {
	t.Parallel()
	g := newAdminEngine(t)
	g.SetStock(t, "SKU-1", 10)
	var want []string
	for i := range 3 {
		want = append(want, g.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "u1"}).ID)
		g.CreateOrder(t, enginetest.CreateOrderOpts{UserID: fmt.Sprintf("other-%d", i)})
	}
	var got []string
	path := "/v1/admin/orders?user_id=u1&state=pending_payment&limit=2"
	for pages := 0; ; pages++ {
		code, v := g.do(t, http.MethodGet, path, adminToken, "")
		if code != http.StatusOK || pages > 3 {
			t.Fatalf("search = %d %v", code, v)
		}
		for _, o := range v["orders"].([]any) {
			got = append(got, o.(map[string]any)["id"].(string))
		}
		next, _ := v["next_cursor"].(string)
		if next == "" {
			break
		}
		path = "/v1/admin/orders?user_id=u1&state=pending_payment&limit=2&cursor=" + next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pages gave %v, want %v", got, want)
	}
	if _, v := g.do(t, http.MethodGet, "/v1/admin/orders?state=closed", adminToken, ""); len(v["orders"].([]any)) != 0 {
		t.Errorf("closed orders: %v, want none", v)
	}
	// A filter nothing can match is a mistake, not an empty page (they answered 200 []).
	for _, bad := range []string{"created_from=yesterday", "limit=0", "cursor=%21%21", "state=bogus", "flow=nope",
		"flow=standard&state=group_failed", "cursor=garbage"} {
		if code, v := g.do(t, http.MethodGet, "/v1/admin/orders?"+bad, adminToken, ""); code != http.StatusUnprocessableEntity {
			t.Errorf("?%s = %d %v, want 422", bad, code, v)
		}
	}
	if code, v := g.do(t, http.MethodGet, "/v1/admin/jobs/runs?job=bogus", adminToken, ""); code != http.StatusUnprocessableEntity {
		t.Errorf("job runs of job bogus = %d %v, want 422", code, v)
	}
	if code, _ := g.do(t, http.MethodGet, "/v1/admin/jobs/runs?job=sweep", adminToken, ""); code != http.StatusOK {
		t.Errorf("job runs of the sweep = %d, want 200", code)
	}
	code, v := g.do(t, http.MethodGet, "/v1/admin/orders/"+want[0], adminToken, "")
	if code != http.StatusOK || v["order"].(map[string]any)["id"] != want[0] || len(v["transitions"].([]any)) != 1 {
		t.Errorf("order detail = %d %v, want the order and its creation row", code, v)
	}
	code, v = g.do(t, http.MethodGet, "/v1/admin/orders/"+want[0]+"/reconcile", adminToken, "")
	if fs, _ := v["findings"].([]any); code != http.StatusOK || fs == nil || len(fs) != 0 {
		t.Errorf("reconcile = %d %v, want findings []", code, v)
	}
	if code, _ := g.do(t, http.MethodGet, "/v1/admin/orders/nope/reconcile", adminToken, ""); code != http.StatusNotFound {
		t.Errorf("reconcile of an unknown order = %d, want 404", code)
	}
}
