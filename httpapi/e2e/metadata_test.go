package e2e_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
)

// TestMetadataOverHTTP: metadata set at the create of an order, payment, refund, group
// (and its member orders) and trip is returned by every read, changed by PATCH as a JSON
// merge patch, carried in the order's events, and bad metadata is 422 invalid-input that
// changes nothing.
func TestMetadataOverHTTP(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	metadataOf := func(method, target, body string, want int) orderly.Metadata {
		t.Helper()
		rec := g.send(method, target, body)
		var v struct {
			Metadata orderly.Metadata `json:"metadata"`
		}
		if rec.Code != want || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
			t.Fatalf("%s %s = %d %s, want %d", method, target, rec.Code, rec.Body, want)
		}
		if v.Metadata == nil {
			t.Fatalf("%s %s: no metadata object in %s", method, target, rec.Body)
		}
		return v.Metadata
	}
	same := func(what string, got, want orderly.Metadata) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s: metadata = %v, want %v", what, got, want)
		}
	}
	invalid := func(method, target, body string) {
		t.Helper()
		if rec := g.send(method, target, body); rec.Code != 422 || problemCode(rec) != orderly.EINVALID {
			t.Errorf("%s %s = %d %s, want 422 %s", method, target, rec.Code, rec.Body, orderly.EINVALID)
		}
	}
	g.must(t, 200, http.MethodPut, "/v1/inventory/md-sku", `{"available":10}`, "")
	const item = `"items":[{"sku":"md-sku","quantity":1,"unit_price":700}]`

	// An order: create, read, patch (set, remove, keep), the merge-patch media type.
	rec := g.send(http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD",`+item+`,"metadata":{"cart_id":"c-1","customer":"42"}}`)
	var o struct {
		ID       string           `json:"id"`
		Metadata orderly.Metadata `json:"metadata"`
	}
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &o) != nil {
		t.Fatalf("create = %d %s", rec.Code, rec.Body)
	}
	same("created order", o.Metadata, orderly.Metadata{"cart_id": "c-1", "customer": "42"})
	same("GET order", metadataOf(http.MethodGet, "/v1/orders/"+o.ID, "", 200), o.Metadata)
	patched := metadataOf(http.MethodPatch, "/v1/orders/"+o.ID, `{"metadata":{"customer":null,"note":"gift wrap"}}`, 200)
	same("patched order", patched, orderly.Metadata{"cart_id": "c-1", "note": "gift wrap"})
	r := httptest.NewRequest(http.MethodPatch, "/v1/orders/"+o.ID, strings.NewReader(`{"metadata":{"note":null}}`))
	r.Header.Set("Content-Type", "application/merge-patch+json")
	r.Header.Set("Authorization", "Bearer "+idAdminToken)
	rec = httptest.NewRecorder()
	if g.h.ServeHTTP(rec, r); rec.Code != 200 {
		t.Fatalf("PATCH as application/merge-patch+json = %d %s", rec.Code, rec.Body)
	}
	same("after the merge-patch", metadataOf(http.MethodGet, "/v1/orders/"+o.ID, "", 200), orderly.Metadata{"cart_id": "c-1"})

	// Bad metadata changes nothing: not the order, and no order is created (the stock says so).
	tooMany := map[string]string{}
	for i := range orderly.MetadataMaxKeys + 1 {
		tooMany[strings.Repeat("k", i%40+1)+string(rune('a'+i/40))] = "v"
	}
	tooManyJSON, _ := json.Marshal(map[string]any{"metadata": tooMany})
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, string(tooManyJSON))
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, `{"metadata":{"k":"`+strings.Repeat("v", 501)+`"}}`)
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, `{"metadata":{"`+strings.Repeat("k", 41)+`":"v"}}`)
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, `{"metadata":{"k":1}}`)
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, `{}`)
	invalid(http.MethodPatch, "/v1/orders/"+o.ID, `{"metadata":{"k":"v"},"state":"paid"}`)
	same("after refused patches", metadataOf(http.MethodGet, "/v1/orders/"+o.ID, "", 200), orderly.Metadata{"cart_id": "c-1"})
	invalid(http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD",`+item+`,"metadata":{"k":"`+strings.Repeat("v", 501)+`"}}`)
	var stock struct{ Available, Held int64 }
	_ = json.Unmarshal(g.send(http.MethodGet, "/v1/inventory/md-sku", "").Body.Bytes(), &stock)
	if stock.Available != 9 || stock.Held != 1 {
		t.Errorf("stock after a refused create = %+v, want 9 available, 1 held (the first order only)", stock)
	}
	if rec := g.send(http.MethodPatch, "/v1/orders/nope", `{"metadata":{"k":"v"}}`); rec.Code != 404 {
		t.Errorf("PATCH of an unknown order = %d, want 404", rec.Code)
	}
	if rec := g.send(http.MethodPatch, "/v1/trips/"+o.ID, `{"metadata":{"k":"v"}}`); rec.Code != 404 {
		t.Errorf("PATCH /v1/trips/{an order's id} = %d %s, want 404", rec.Code, rec.Body)
	}
	// The same Idempotency-Key with other metadata is another request.
	g.sendKey(http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD",`+item+`,"metadata":{"a":"1"}}`, "md-key")
	if rec := g.sendKey(http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD",`+item+`,"metadata":{"a":"2"}}`, "md-key"); rec.Code != 422 || problemCode(rec) != orderly.EIDEMPOTENCY {
		t.Errorf("replay with other metadata = %d %s, want 422 %s", rec.Code, rec.Body, orderly.EIDEMPOTENCY)
	}

	// The order's events carry its metadata as it was when each was written.
	g.must(t, 200, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", "", "")
	var events struct {
		Events []struct {
			Topic string             `json:"topic"`
			Data  orderly.OrderEvent `json:"data"`
		} `json:"events"`
	}
	_ = json.Unmarshal(g.send(http.MethodGet, "/v1/events?order_id="+o.ID, "").Body.Bytes(), &events)
	if len(events.Events) != 1 || events.Events[0].Topic != orderly.TopicOrderClosed {
		t.Fatalf("events of the order = %+v, want its order.closed", events)
	}
	same("order.closed data", events.Events[0].Data.Metadata, orderly.Metadata{"cart_id": "c-1"})

	// A payment attempt.
	order2 := g.must(t, 201, http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD",`+item+`}`, "id")
	same("order without metadata", metadataOf(http.MethodGet, "/v1/orders/"+order2, "", 200), orderly.Metadata{})
	invalid(http.MethodPost, "/v1/orders/"+order2+"/payments", `{"metadata":{"":"v"}}`)
	pay := g.must(t, 201, http.MethodPost, "/v1/orders/"+order2+"/payments", `{"metadata":{"attempt":"a-1"}}`, "payment_id")
	same("GET payment", metadataOf(http.MethodGet, "/v1/payments/"+pay, "", 200), orderly.Metadata{"attempt": "a-1"})
	same("patched payment", metadataOf(http.MethodPatch, "/v1/payments/"+pay, `{"metadata":{"attempt":"a-2"}}`, 200), orderly.Metadata{"attempt": "a-2"})

	// A refund, readable on its own now.
	g.must(t, 201, http.MethodPost, "/v1/wallets/md-buyer/credits", `{"amount":10000,"currency":"USD"}`, "id")
	paid := g.must(t, 201, http.MethodPost, "/v1/orders", `{"user_id":"md-buyer","currency":"USD","payment_method":"wallet",`+item+`}`, "id")
	refund := g.must(t, 201, http.MethodPost, "/v1/orders/"+paid+"/refunds", `{"amount":100,"metadata":{"rma":"R-1"}}`, "id")
	same("GET refund", metadataOf(http.MethodGet, "/v1/refunds/"+refund, "", 200), orderly.Metadata{"rma": "R-1"})
	same("patched refund", metadataOf(http.MethodPatch, "/v1/refunds/"+refund, `{"metadata":{"rma":null}}`, 200), orderly.Metadata{})
	if rec := g.send(http.MethodGet, "/v1/refunds/"+paid, ""); rec.Code != 404 {
		t.Errorf("GET /v1/refunds/{an order's id} = %d, want 404", rec.Code)
	}

	// A group and its member orders; group_metadata only at the open.
	deal := g.must(t, 201, http.MethodPost, "/v1/deals", `{"sku":"md-sku","group_price":500,"currency":"USD","min_members":2,"max_members":3,"group_time_limit_seconds":600}`, "id")
	rec = g.send(http.MethodPost, "/v1/groups", `{"deal_id":"`+deal+`","user_id":"md-leader","metadata":{"m":"leader"},"group_metadata":{"campaign":"x"}}`)
	var opened struct {
		Group struct {
			ID       string           `json:"id"`
			Metadata orderly.Metadata `json:"metadata"`
		} `json:"group"`
		Order struct {
			Metadata orderly.Metadata `json:"metadata"`
		} `json:"order"`
	}
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &opened) != nil {
		t.Fatalf("open group = %d %s", rec.Code, rec.Body)
	}
	same("opened group", opened.Group.Metadata, orderly.Metadata{"campaign": "x"})
	same("leader's order", opened.Order.Metadata, orderly.Metadata{"m": "leader"})
	invalid(http.MethodPost, "/v1/groups/"+opened.Group.ID+"/join", `{"user_id":"md-joiner","group_metadata":{"campaign":"y"}}`)
	invalid(http.MethodPost, "/v1/groups", `{"deal_id":"`+deal+`","user_id":"md-leader2","group_metadata":{"":"x"}}`)
	same("patched group", metadataOf(http.MethodPatch, "/v1/groups/"+opened.Group.ID, `{"metadata":{"wave":"2"}}`, 200),
		orderly.Metadata{"campaign": "x", "wave": "2"})

	// A trip: its metadata is its order's.
	trip := g.must(t, 201, http.MethodPost, "/v1/trips", `{"rider_id":"md-rider","currency":"USD","estimate":4000,"metadata":{"ride":"r-1"}}`, "id")
	same("GET trip", metadataOf(http.MethodGet, "/v1/trips/"+trip, "", 200), orderly.Metadata{"ride": "r-1"})
	same("patched trip", metadataOf(http.MethodPatch, "/v1/trips/"+trip, `{"metadata":{"zone":"north"}}`, 200), orderly.Metadata{"ride": "r-1", "zone": "north"})
	same("the trip's order", metadataOf(http.MethodGet, "/v1/orders/"+trip, "", 200), orderly.Metadata{"ride": "r-1", "zone": "north"})
}
