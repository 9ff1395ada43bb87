package e2e_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/orderlyhq/orderly"
)

// TestEventsOverHTTP: GET /v1/events lists a cancelled order's order.closed with its data,
// filters by topic and order, and answers 422 invalid-input, changing nothing, for a bad
// position (one no page gave), an unknown topic, a bad order id or limit, a parameter twice.
func TestEventsOverHTTP(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	g.must(t, 200, http.MethodPut, "/v1/inventory/ev-sku", `{"available":5}`, "")
	id := g.must(t, 201, http.MethodPost, "/v1/orders", `{"user_id":"ev-buyer","currency":"USD","items":[{"sku":"ev-sku","quantity":1,"unit_price":700}]}`, "id")
	g.must(t, 200, http.MethodPost, "/v1/orders/"+id+"/cancel", "", "")
	type page struct {
		Events []struct {
			ID       string          `json:"id"`
			Topic    string          `json:"topic"`
			Key      string          `json:"key"`
			Sequence int64           `json:"sequence"`
			Data     json.RawMessage `json:"data"`
		} `json:"events"`
		NextAfter string `json:"next_after"`
	}
	list := func(query string) page {
		t.Helper()
		rec := g.send(http.MethodGet, "/v1/events"+query, "")
		var p page
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
			t.Fatalf("GET /v1/events%s = %d %s", query, rec.Code, rec.Body)
		}
		return p
	}
	p := list("?order_id=" + id)
	if len(p.Events) != 1 || p.Events[0].Topic != orderly.TopicOrderClosed || p.Events[0].Key != id || p.Events[0].Sequence != 1 || p.NextAfter == "" {
		t.Fatalf("the order's events = %+v, want its order.closed #1", p)
	}
	var ev orderly.OrderEvent
	if err := json.Unmarshal(p.Events[0].Data, &ev); err != nil || ev.OrderID != id || ev.Reason != string(orderly.CloseReasonBuyerCancelled) {
		t.Errorf("data = %s, want the order.closed body of %s (buyer_cancelled)", p.Events[0].Data, id)
	}
	if q := list("?topic=order.paid&order_id=" + id); len(q.Events) != 0 {
		t.Errorf("order.paid of the cancelled order = %+v, want none", q.Events)
	}
	if q := list("?after=" + p.NextAfter + "&order_id=" + id); len(q.Events) != 0 || q.NextAfter != p.NextAfter {
		t.Errorf("after the last = %+v, want an empty page keeping next_after %s", q, p.NextAfter)
	}
	// Positions no page gave: not canonical, 0, beyond the newest (a cursor kept across a
	// restore would skip events); a parameter given twice; a malformed query.
	bad := []string{"?after=abc", "?after=-1", "?after=0", "?after=+" + p.NextAfter, "?after=0" + p.NextAfter, "?after=999999999999",
		"?after=" + p.NextAfter + "&after=1", "?limit=5;x", "?topic=order.nope", "?order_id=%00", "?limit=0", "?limit=5000"}
	for _, bad := range bad {
		if rec := g.send(http.MethodGet, "/v1/events"+bad, ""); rec.Code != 422 || problemCode(rec) != orderly.EINVALID {
			t.Errorf("GET /v1/events%s = %d %s, want 422 %s", bad, rec.Code, rec.Body, orderly.EINVALID)
		}
	}
}
