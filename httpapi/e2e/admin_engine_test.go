package e2e_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/admintest"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// TestAdminUnauthorized: a real admin route answers 401 with a problem without the token
// and with a wrong one, and 200 with the right one.
func TestAdminUnauthorized(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	for _, c := range []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", admintest.Token + "x", http.StatusUnauthorized},
		{"right token", admintest.Token, http.StatusOK},
	} {
		code, v := g.Do(t, http.MethodGet, "/v1/admin/outbox/dead", c.token, "")
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
	g := admintest.New(t)
	id := g.DeadMessage(t, "k-1")

	code, v := g.Do(t, http.MethodGet, "/v1/admin/outbox/dead?topic="+admintest.TopicCounted, admintest.Token, "")
	msgs, _ := v["messages"].([]any)
	if code != http.StatusOK || len(msgs) != 1 {
		t.Fatalf("dead letters = %d %v, want one", code, v)
	}
	m := msgs[0].(map[string]any)
	if m["id"] != float64(id) || m["attempts"] != float64(1) || m["last_error"] != "subscriber down" || m["key"] != "k-1" {
		t.Errorf("dead letter = %v, want id %d, 1 attempt, last_error subscriber down, key k-1", m, id)
	}

	g.SetFailing(false)
	path := fmt.Sprintf("/v1/admin/outbox/dead/%d/redrive", id)
	if code, v := g.Do(t, http.MethodPost, path, admintest.Token, ""); code != http.StatusOK || v["redriven"] != float64(1) {
		t.Fatalf("re-drive = %d %v", code, v)
	}
	g.Drain(t)
	g.Drain(t)
	n := g.Delivered(id)
	if n != 1 {
		t.Errorf("delivered %d times, want once", n)
	}
	if code, v := g.Do(t, http.MethodPost, path, admintest.Token, ""); code != http.StatusNotFound {
		t.Errorf("second re-drive = %d %v, want 404", code, v)
	}
	_, v = g.Do(t, http.MethodGet, fmt.Sprintf("/v1/admin/actions?target=%d", id), admintest.Token, "")
	acts, _ := v["actions"].([]any)
	if len(acts) != 1 || acts[0].(map[string]any)["action"] != "redrive" || acts[0].(map[string]any)["operator"] != "alice" {
		t.Errorf("audit of %d = %v, want one redrive by alice", id, v)
	}
}

// TestAdminRedriveByFilter: a re-drive by topic re-drives every dead letter of the topic.
func TestAdminRedriveByFilter(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	ids := []int64{g.DeadMessage(t, "k-a"), g.DeadMessage(t, "k-b")}
	g.SetFailing(false)
	if code, v := g.Do(t, http.MethodPost, "/v1/admin/outbox/dead/redrive", admintest.Token, `{"topic":"`+admintest.TopicCounted+`"}`); code != http.StatusOK || v["redriven"] != float64(2) {
		t.Fatalf("re-drive by filter = %d %v, want 2", code, v)
	}
	g.Drain(t)
	for _, id := range ids {
		if g.Delivered(id) != 1 {
			t.Errorf("message %d delivered %d times, want once", id, g.Delivered(id))
		}
	}
}

// TestAdminDiscardAudited: a discard needs a reason; it deletes the dead letter and the
// audit keeps who, why and the message.
func TestAdminDiscardAudited(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	id := g.DeadMessage(t, "k-2")
	path := fmt.Sprintf("/v1/admin/outbox/dead/%d/discard", id)
	if code, v := g.Do(t, http.MethodPost, path, admintest.Token, `{"reason":""}`); code != http.StatusUnprocessableEntity {
		t.Errorf("discard without a reason = %d %v, want 422", code, v)
	}
	if code, v := g.Do(t, http.MethodPost, path, admintest.Token, `{"reason":"subscriber retired"}`); code != http.StatusOK || v["discarded"] != float64(id) {
		t.Fatalf("discard = %d %v", code, v)
	}
	if code, _ := g.Do(t, http.MethodPost, path, admintest.Token, `{"reason":"again"}`); code != http.StatusNotFound {
		t.Errorf("second discard = %d, want 404", code)
	}
	if _, v := g.Do(t, http.MethodGet, "/v1/admin/outbox/dead", admintest.Token, ""); len(v["messages"].([]any)) != 0 {
		t.Errorf("dead letters after the discard: %v", v)
	}
	_, v := g.Do(t, http.MethodGet, fmt.Sprintf("/v1/admin/actions?target=%d", id), admintest.Token, "")
	acts, _ := v["actions"].([]any)
	if len(acts) != 1 {
		t.Fatalf("audit = %v, want one action", v)
	}
	a := acts[0].(map[string]any)
	detail, _ := a["detail"].(map[string]any)
	if a["action"] != "discard" || a["operator"] != "alice" || a["reason"] != "subscriber retired" || a["trace_id"] == "" ||
		detail["topic"] != admintest.TopicCounted || detail["key"] != "k-2" {
		t.Errorf("audit row = %v, want discard by alice, the reason, a trace id and the message", a)
	}
}

// TestAdminSearchOrders pages through a user's orders with the cursor, filters by state,
// and reads one order's history and reconciliation.
func TestAdminSearchOrders(t *testing.T) {
	t.Parallel()
	g := admintest.New(t)
	g.SetStock(t, "SKU-1", 10)
	var want []string
	for i := range 3 {
		want = append(want, g.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "u1"}).ID)
		g.CreateOrder(t, enginetest.CreateOrderOpts{UserID: fmt.Sprintf("other-%d", i)})
	}
	var got []string
	path := "/v1/admin/orders?user_id=u1&state=pending_payment&limit=2"
	for pages := 0; ; pages++ {
		code, v := g.Do(t, http.MethodGet, path, admintest.Token, "")
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
	if _, v := g.Do(t, http.MethodGet, "/v1/admin/orders?state=closed", admintest.Token, ""); len(v["orders"].([]any)) != 0 {
		t.Errorf("closed orders: %v, want none", v)
	}
	// A filter nothing can match is a mistake, not an empty page (they answered 200 []).
	for _, bad := range []string{"created_from=yesterday", "limit=0", "cursor=%21%21", "state=bogus", "flow=nope",
		"flow=standard&state=group_failed", "cursor=garbage"} {
		if code, v := g.Do(t, http.MethodGet, "/v1/admin/orders?"+bad, admintest.Token, ""); code != http.StatusUnprocessableEntity {
			t.Errorf("?%s = %d %v, want 422", bad, code, v)
		}
	}
	if code, v := g.Do(t, http.MethodGet, "/v1/admin/jobs/runs?job=bogus", admintest.Token, ""); code != http.StatusUnprocessableEntity {
		t.Errorf("job runs of job bogus = %d %v, want 422", code, v)
	}
	if code, _ := g.Do(t, http.MethodGet, "/v1/admin/jobs/runs?job=sweep", admintest.Token, ""); code != http.StatusOK {
		t.Errorf("job runs of the sweep = %d, want 200", code)
	}
	code, v := g.Do(t, http.MethodGet, "/v1/admin/orders/"+want[0], admintest.Token, "")
	if code != http.StatusOK || v["order"].(map[string]any)["id"] != want[0] || len(v["transitions"].([]any)) != 1 {
		t.Errorf("order detail = %d %v, want the order and its creation row", code, v)
	}
	code, v = g.Do(t, http.MethodGet, "/v1/admin/orders/"+want[0]+"/reconcile", admintest.Token, "")
	if fs, _ := v["findings"].([]any); code != http.StatusOK || fs == nil || len(fs) != 0 {
		t.Errorf("reconcile = %d %v, want findings []", code, v)
	}
	if code, _ := g.Do(t, http.MethodGet, "/v1/admin/orders/nope/reconcile", admintest.Token, ""); code != http.StatusNotFound {
		t.Errorf("reconcile of an unknown order = %d, want 404", code)
	}
}
