package groupbuy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/verify"
)

// post sends a JSON body and returns the status and the decoded answer.
func post(t *testing.T, url string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b)) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("POST %s: %d, undecodable body: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// TestLastSeatOverHTTP: through the API, two joins at once for the last seat get one 201
// and one 409 whose problem type is group-full; the group then shows two seats taken.
func TestLastSeatOverHTTP(t *testing.T) {
	t.Parallel()
	s := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: []byte("secret")})
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/v1/inventory/SKU-H", bytes.NewReader([]byte(`{"available":10}`)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("set stock: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	code, deal := post(t, s.URL+"/v1/deals", map[string]any{"sku": "SKU-H", "group_price": 990, "currency": "EUR",
		"min_members": 2, "max_members": 2, "group_time_limit_seconds": 3600})
	if code != 201 || deal["member_payment_timeout_seconds"] != float64(3600) {
		t.Fatalf("create deal: %d %v", code, deal)
	}
	code, opened := post(t, s.URL+"/v1/groups", map[string]any{"deal_id": deal["id"], "user_id": "leader"})
	if code != 201 {
		t.Fatalf("open group: %d %v", code, opened)
	}
	g := opened["group"].(map[string]any)
	if o := opened["order"].(map[string]any); o["flow"] != "group_buy" || o["amount"] != float64(990) || o["expires_at"] != g["deadline_at"] {
		t.Fatalf("leader's order: %v (group %v)", o, g)
	}
	var (
		wg      sync.WaitGroup
		barrier = make(chan struct{})
		codes   = make([]int, 2)
		bodies  = make([]map[string]any, 2)
	)
	for i := range 2 {
		wg.Go(func() {
			<-barrier
			codes[i], bodies[i] = post(t, fmt.Sprintf("%s/v1/groups/%s/join", s.URL, g["id"]), map[string]any{"user_id": fmt.Sprintf("u%d", i)})
		})
	}
	close(barrier)
	wg.Wait()
	got := slices.Sorted(slices.Values(codes))
	if !slices.Equal(got, []int{201, 409}) {
		t.Fatalf("statuses %v (%v)", codes, bodies)
	}
	loser := bodies[slices.Index(codes, 409)]
	if loser["type"] != httpapi.ProblemTypeBase+"group-full" {
		t.Fatalf("409 body: %v", loser)
	}
	code, again := post(t, fmt.Sprintf("%s/v1/groups/%s/join", s.URL, g["id"]), map[string]any{"user_id": "leader"})
	if code != 409 || again["type"] != httpapi.ProblemTypeBase+"already-member" {
		t.Fatalf("leader joins again: %d %v", code, again)
	}
	resp, err := http.Get(fmt.Sprintf("%s/v1/groups/%s", s.URL, g["id"])) //nolint:noctx // a test against a local server
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var group map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&group); err != nil || group["seats_taken"] != float64(2) || len(group["members"].([]any)) != 2 {
		t.Fatalf("group: %v %v", group, err)
	}
}

// TestMemberInputOverHTTP: an explicit quantity below 1 in an open or a join, and a leave
// without a user, are 422 invalid-input (quantity 0 was read as absent, and created a
// one-unit order; a leave without a user answered 404); nothing is written.
func TestMemberInputOverHTTP(t *testing.T) {
	t.Parallel()
	s := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: []byte("secret")})
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/v1/inventory/SKU-Q", bytes.NewReader([]byte(`{"available":10}`)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("set stock: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	code, deal := post(t, s.URL+"/v1/deals", map[string]any{"sku": "SKU-Q", "group_price": 500, "currency": "EUR",
		"min_members": 2, "max_members": 3, "group_time_limit_seconds": 3600})
	if code != 201 {
		t.Fatalf("create deal: %d %v", code, deal)
	}
	for _, q := range []int{0, -1} {
		if code, body := post(t, s.URL+"/v1/groups", map[string]any{"deal_id": deal["id"], "user_id": "leader", "quantity": q}); code != 422 || body["type"] != "https://orderly.dev/problems/invalid-input" {
			t.Fatalf("open with quantity %d: %d %v, want 422 invalid-input", q, code, body)
		}
	}
	code, opened := post(t, s.URL+"/v1/groups", map[string]any{"deal_id": deal["id"], "user_id": "leader"})
	if code != 201 || opened["order"].(map[string]any)["amount"] != float64(500) {
		t.Fatalf("open group without quantity: %d %v, want 201 with one unit", code, opened)
	}
	g := opened["group"].(map[string]any)
	if code, body := post(t, s.URL+"/v1/groups/"+g["id"].(string)+"/join", map[string]any{"user_id": "m1", "quantity": 0}); code != 422 {
		t.Fatalf("join with quantity 0: %d %v, want 422", code, body)
	}
	if code, body := post(t, s.URL+"/v1/groups/"+g["id"].(string)+"/leave", map[string]any{}); code != 422 || body["type"] != "https://orderly.dev/problems/invalid-input" {
		t.Fatalf("leave without user_id: %d %v, want 422 invalid-input", code, body)
	}
	resp, err := http.Get(s.URL + "/v1/groups/" + g["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got["seats_taken"] != float64(1) {
		t.Fatalf("group after the refusals: %v, %v; want the leader's seat only", got, err)
	}
}

// TestLastLeaverEndsGroupOverHTTP: the only member of a forming group leaves; the group
// ends (failed, no seat taken) instead of staying forming under nobody, and a join is
// refused. Before, it stayed forming until its deadline, open to joins.
func TestLastLeaverEndsGroupOverHTTP(t *testing.T) {
	t.Parallel()
	s := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: []byte("secret")})
	req, _ := http.NewRequest(http.MethodPut, s.URL+"/v1/inventory/SKU-L", bytes.NewReader([]byte(`{"available":10}`)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("set stock: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	code, deal := post(t, s.URL+"/v1/deals", map[string]any{"sku": "SKU-L", "group_price": 700, "currency": "EUR",
		"min_members": 2, "max_members": 3, "group_time_limit_seconds": 3600})
	if code != 201 {
		t.Fatalf("create deal: %d %v", code, deal)
	}
	code, opened := post(t, s.URL+"/v1/groups", map[string]any{"deal_id": deal["id"], "user_id": "leader"})
	if code != 201 {
		t.Fatalf("open group: %d %v", code, opened)
	}
	id := opened["group"].(map[string]any)["id"].(string)
	code, left := post(t, s.URL+"/v1/groups/"+id+"/leave", map[string]any{"user_id": "leader"})
	if code != 200 || left["state"] != "failed" || left["seats_taken"] != float64(0) || left["paid_members"] != float64(0) {
		t.Fatalf("the only member leaves: %d %v, want 200 with the group failed and no seat taken", code, left)
	}
	if code, body := post(t, s.URL+"/v1/groups/"+id+"/join", map[string]any{"user_id": "late"}); code != 409 {
		t.Fatalf("join the ended group: %d %v, want 409", code, body)
	}
	// verify accepts a group that failed before its deadline once nobody held a seat in it.
	flows, err := orderly.NewFlows(orderly.StandardFlow, groupbuy.Flow)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Check(t.Context(), s.Store, verify.Options{Flows: flows, Groups: verify.ReadGroups})
	if err != nil || !rep.OK() || rep.Groups["failed"] != 1 {
		t.Fatalf("verify: %v, groups %v, violations:\n%s", err, rep.Groups, strings.Join(rep.Violations, "\n"))
	}
}
