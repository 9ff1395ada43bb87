package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	orderlyengine "github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
)

// idEngine is a whole engine (every flow, the wallet, the admin routes) behind the API;
// every request carries the admin token, which has every scope.
type idEngine struct {
	h   http.Handler
	seq int
}

const idAdminToken = "id-kinds-admin-token"

func newIDEngine(t *testing.T) *idEngine {
	t.Helper()
	e, err := orderlyengine.Open(t.Context(), orderlyengine.Config{
		DatabaseURL: sqlitetest.Path(t), CallbackSecret: engineSecret, AdminToken: idAdminToken, Gateway: sim.New(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	// Not started: no relay delivers to the webhook subscriptions' addresses.
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return &idEngine{h: e.Handler()}
}

// send serves one request with the admin token and a fresh Idempotency-Key.
func (g *idEngine) send(method, target, body string) *httptest.ResponseRecorder {
	g.seq++
	return g.sendKey(method, target, body, fmt.Sprintf("key-%d", g.seq))
}

// sendKey serves one request with the admin token and Idempotency-Key key ("" for none).
func (g *idEngine) sendKey(method, target, body, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+idAdminToken)
	if key != "" {
		req.Header.Set(httpapi.IdempotencyKeyHeader, key)
	}
	req.Header.Set(httpapi.OperatorHeader, "alice")
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	return rec
}

// must serves a request that has to answer want and returns the answer's string field.
func (g *idEngine) must(t *testing.T, want int, method, target, body, field string) string {
	t.Helper()
	rec := g.send(method, target, body)
	var v map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &v)
	if rec.Code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, target, rec.Code, rec.Body, want)
	}
	s, _ := v[field].(string)
	if field != "" && s == "" {
		t.Fatalf("%s %s: no %s in %s", method, target, field, rec.Body)
	}
	return s
}

// objects creates one object of every kind that has an id (fresh ones, for users of tag)
// and returns the ids by kind.
func (g *idEngine) objects(t *testing.T, tag string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	user := "buyer-" + tag
	g.must(t, 200, http.MethodPut, "/v1/inventory/SKU-"+tag, `{"available":100}`, "")
	ids["order"] = g.must(t, 201, http.MethodPost, "/v1/orders",
		`{"user_id":"`+user+`","currency":"USD","items":[{"sku":"SKU-`+tag+`","quantity":1,"unit_price":1000}]}`, "id")
	ids["payment"] = g.must(t, 201, http.MethodPost, "/v1/orders/"+ids["order"]+"/payments", "", "payment_id")
	ids["coupon"] = g.must(t, 201, http.MethodPost, "/v1/coupons", `{"user_id":"`+user+`","amount_off":100,"currency":"USD"}`, "id")
	ids["deal"] = g.must(t, 201, http.MethodPost, "/v1/deals",
		`{"sku":"SKU-`+tag+`","group_price":800,"currency":"USD","min_members":2,"max_members":3,"group_time_limit_seconds":600}`, "id")
	rec := g.send(http.MethodPost, "/v1/groups", `{"deal_id":"`+ids["deal"]+`","user_id":"`+user+`"}`)
	var grp map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &grp)
	if rec.Code != 201 {
		t.Fatalf("open group = %d %s", rec.Code, rec.Body)
	}
	ids["group"], _ = grp["group"].(map[string]any)["id"].(string)
	ids["group_order"], _ = grp["order"].(map[string]any)["id"].(string)
	g.must(t, 201, http.MethodPost, "/v1/wallets/"+user+"/credits", `{"amount":100000,"currency":"USD"}`, "id")
	ids["wallet_order"] = g.must(t, 201, http.MethodPost, "/v1/orders",
		`{"user_id":"`+user+`","currency":"USD","payment_method":"wallet","items":[{"sku":"SKU-`+tag+`","quantity":1,"unit_price":1000}]}`, "id")
	ids["refund"] = g.must(t, 201, http.MethodPost, "/v1/orders/"+ids["wallet_order"]+"/refunds", `{"amount":100}`, "id")
	trip := g.must(t, 201, http.MethodPost, "/v1/trips", `{"rider_id":"rider-`+tag+`","currency":"USD","estimate":4000}`, "id")
	g.must(t, 200, http.MethodPost, "/v1/trips/"+trip+"/assign", `{"driver_id":"driver-`+tag+`"}`, "")
	g.must(t, 200, http.MethodPost, "/v1/trips/"+trip+"/start", "", "")
	ids["saga"] = g.must(t, 200, http.MethodPost, "/v1/trips/"+trip+"/end", `{"fare":3000}`, "payment_saga_id")
	ids["trip"] = trip
	ids["requested_trip"] = g.must(t, 201, http.MethodPost, "/v1/trips", `{"rider_id":"rider2-`+tag+`","currency":"USD","estimate":4000}`, "id")
	ids["webhook"] = g.must(t, 201, http.MethodPost, "/v1/admin/webhooks", `{"url":"https://shop.example/hooks","topics":["order.paid"]}`, "id")
	ids["user"] = user
	ids["sku"] = "SKU-" + tag
	ids["outbox_message"] = "1"
	return ids
}

// routeBodies are valid bodies of the routes with a path parameter that take one, so that a
// call reaches the lookup of its id.
var routeBodies = map[string]string{
	"POST /v1/orders/{id}/events":             `{"event":"ship"}`,
	"POST /v1/orders/{id}/refunds":            `{"amount":100}`,
	"PUT /v1/inventory/{sku}":                 `{"available":5}`,
	"POST /v1/groups/{id}/join":               `{"user_id":"joiner"}`,
	"POST /v1/groups/{id}/leave":              `{"user_id":"joiner"}`,
	"POST /v1/trips/{id}/assign":              `{"driver_id":"driver-x"}`,
	"POST /v1/trips/{id}/end":                 `{"fare":1000}`,
	"POST /v1/wallets/{user_id}/credits":      `{"amount":100,"currency":"USD"}`,
	"POST /v1/admin/outbox/dead/{id}/discard": `{"reason":"test"}`,
	"POST /v1/channels/{channel}/webhook":     `{}`,
	"PATCH /v1/orders/{id}":                   `{"metadata":{"k":"v"}}`,
	"PATCH /v1/trips/{id}":                    `{"metadata":{"k":"v"}}`,
	"PATCH /v1/payments/{id}":                 `{"metadata":{"k":"v"}}`,
	"PATCH /v1/refunds/{id}":                  `{"metadata":{"k":"v"}}`,
	"PATCH /v1/groups/{id}":                   `{"metadata":{"k":"v"}}`,
}

// malformedIDs are path segments that no id has: a NUL byte, invalid UTF-8, a bad escape,
// an escaped slash, a long one.
var malformedIDs = []string{"%00", "%FF%FE", "a%2Fb", "%C3%28", strings.Repeat("x", 2000), "%20"}

// TestEveryRouteTakesEveryKindOfID: every route with a path parameter, called with an id of
// every kind (an order of each flow, a trip, a payment, a refund, a coupon, a deal, a group,
// a saga, a webhook subscription, a user, an outbox message) and with malformed ids, answers
// a success or a 4xx problem, never a 5xx. Each route gets fresh objects, so that what an
// earlier call changed does not hide a later one's answer.
func TestEveryRouteTakesEveryKindOfID(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	type route struct{ method, pattern string }
	var routes []route
	var gets []string
	err := chi.Walk(g.h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.Contains(pattern, "{") {
			routes = append(routes, route{method, pattern})
		} else if method == http.MethodGet {
			gets = append(gets, pattern)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A malformed query (a NUL byte, invalid UTF-8, a bad escape) on every list.
	for _, p := range gets {
		for _, q := range []string{"?cursor=%00&limit=%FF", "?cursor=%zz&user_id=%C3%28", "?limit=99999999999999999999"} {
			if rec := g.send(http.MethodGet, p+q, ""); rec.Code >= 500 {
				t.Errorf("GET %s%s = %d %s, want a 4xx or a success", p, q, rec.Code, strings.TrimSpace(rec.Body.String()))
			}
		}
	}
	if len(routes) < 30 {
		t.Fatalf("%d routes with a path parameter: %v", len(routes), routes)
	}
	for i, rt := range routes {
		ids := g.objects(t, fmt.Sprint(i))
		kinds := slices.Sorted(func(yield func(string) bool) {
			for k := range ids {
				if !yield(k) {
					return
				}
			}
		})
		values := make([]string, 0, len(kinds)+len(malformedIDs))
		for _, k := range kinds {
			values = append(values, ids[k])
		}
		values = append(values, malformedIDs...)
		for _, id := range values {
			target := rt.pattern[:strings.Index(rt.pattern, "{")] + id + rt.pattern[strings.Index(rt.pattern, "}")+1:]
			rec := g.send(rt.method, target, routeBodies[rt.method+" "+rt.pattern])
			if rec.Code >= 500 {
				t.Errorf("%s %s (%s) = %d %s, want a 4xx or a success", rt.method, rt.pattern, id, rec.Code, strings.TrimSpace(rec.Body.String()))
			} else if rec.Code >= 400 && rec.Header().Get("Content-Type") != httpapi.ProblemContentType {
				t.Errorf("%s %s (%s) = %d with Content-Type %q, want a problem", rt.method, rt.pattern, id, rec.Code, rec.Header().Get("Content-Type"))
			}
		}
	}
}

// TestOrderRoutesOnATrip: an order route given a trip's id answers 409 wrong-flow, naming
// the trip routes; a settled trip's refund through the order routes was a 500.
func TestOrderRoutesOnATrip(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	ids := g.objects(t, "t")
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/orders/" + ids["trip"] + "/refunds", `{"amount":100}`},
		{http.MethodPost, "/v1/orders/" + ids["trip"] + "/cancel", ""},
		{http.MethodPost, "/v1/orders/" + ids["requested_trip"] + "/cancel", ""},
		{http.MethodPost, "/v1/orders/" + ids["requested_trip"] + "/payments", ""},
		{http.MethodPost, "/v1/orders/" + ids["trip"] + "/events", `{"event":"refund"}`},
	} {
		rec := g.send(c.method, c.path, c.body)
		var p httpapi.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusConflict || p.Type != httpapi.ProblemTypeBase+orderly.EWRONGFLOW || !strings.Contains(p.Detail, "/v1/trips/") {
			t.Errorf("%s %s = %d %s, want 409 %s naming /v1/trips/{id}", c.method, c.path, rec.Code, rec.Body, orderly.EWRONGFLOW)
		}
	}
}

// TestMoneyCap: every money field above orderly.MaxAmount, and an order whose lines sum
// above it, is refused 422 invalid-input naming the field; MaxAmount itself is taken. The
// old code took a unit_price of math.MaxInt64 and sums up to int64 overflow.
func TestMoneyCap(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	ids := g.objects(t, "m")
	g.must(t, 200, http.MethodPut, "/v1/inventory/SKU-2", `{"available":100}`, "")
	max, over := fmt.Sprint(int64(orderly.MaxAmount)), fmt.Sprint(int64(orderly.MaxAmount)+1)
	line := func(sku string, q int, price string) string {
		return fmt.Sprintf(`{"sku":%q,"quantity":%d,"unit_price":%s}`, sku, q, price)
	}
	order := func(lines ...string) string {
		return `{"user_id":"buyer-m","currency":"USD","items":[` + strings.Join(lines, ",") + `]}`
	}
	for _, c := range []struct{ name, path, body, field string }{
		{"unit_price MaxInt64", "/v1/orders", order(line("SKU-m", 1, "9223372036854775807")), "items[0].unit_price"},
		{"unit_price over", "/v1/orders", order(line("SKU-m", 1, over)), "items[0].unit_price"},
		{"quantity × unit_price over", "/v1/orders", order(line("SKU-m", 2, max)), "items[0]: the items' total"},
		{"lines sum over", "/v1/orders", order(line("SKU-m", 1, "600000000000000"), line("SKU-2", 1, "600000000000000")), "items[1]: the items' total"},
		{"amount_off", "/v1/coupons", `{"user_id":"buyer-m","amount_off":` + over + `,"currency":"USD"}`, "amount_off"},
		{"group_price", "/v1/deals", `{"sku":"SKU-m","group_price":` + over + `,"currency":"USD","min_members":2,"max_members":3,"group_time_limit_seconds":600}`, "group_price"},
		{"refund amount", "/v1/orders/" + ids["wallet_order"] + "/refunds", `{"amount":` + over + `}`, "amount"},
		{"top-up amount", "/v1/wallets/buyer-m/credits", `{"amount":` + over + `,"currency":"USD"}`, "amount"},
		{"trip estimate", "/v1/trips", `{"rider_id":"r","currency":"USD","estimate":` + over + `}`, "estimate"},
	} {
		rec := g.send(http.MethodPost, c.path, c.body)
		var p httpapi.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != http.StatusUnprocessableEntity || p.Type != httpapi.ProblemTypeBase+orderly.EINVALID || !strings.HasPrefix(p.Detail, c.field) {
			t.Errorf("%s: %d %s, want 422 invalid-input about %s", c.name, rec.Code, rec.Body, c.field)
		}
	}
	g.must(t, 201, http.MethodPost, "/v1/orders", order(line("SKU-m", 1, max)), "id")
	g.must(t, 201, http.MethodPost, "/v1/coupons", `{"user_id":"buyer-m","amount_off":`+max+`,"currency":"USD"}`, "id")
}
