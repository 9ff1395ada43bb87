package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/idempotency"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// postTargets gives every POST route a request that reaches its service: the kind of id
// its path parameter takes (objects) and a body. The signed provider callbacks take no
// Idempotency-Key (they are deduplicated by the provider's event id).
var postTargets = map[string]struct{ kind, body string }{
	"/v1/orders":                         {"", `{"user_id":"buyer-{tag}","currency":"USD","items":[{"sku":"SKU-{tag}","quantity":1,"unit_price":1000}]}`},
	"/v1/orders/{id}/cancel":             {"order", ""},
	"/v1/orders/{id}/events":             {"order", `{"event":"ship"}`},
	"/v1/orders/{id}/payments":           {"order", ""},
	"/v1/orders/{id}/refunds":            {"wallet_order", `{"amount":100}`},
	"/v1/inventory/{sku}/adjustments":    {"sku", `{"delta":-3}`},
	"/v1/coupons":                        {"", `{"user_id":"buyer-{tag}","amount_off":100,"currency":"USD"}`},
	"/v1/deals":                          {"", `{"sku":"SKU-{tag}","group_price":800,"currency":"USD","min_members":2,"max_members":3,"group_time_limit_seconds":600}`},
	"/v1/groups":                         {"deal", `{"deal_id":"{deal}","user_id":"opener"}`},
	"/v1/groups/{id}/join":               {"group", `{"user_id":"joiner"}`},
	"/v1/groups/{id}/leave":              {"group", `{"user_id":"buyer-{tag}"}`},
	"/v1/trips":                          {"", `{"rider_id":"rider-x","currency":"USD","estimate":4000}`},
	"/v1/trips/{id}/assign":              {"requested_trip", `{"driver_id":"driver-x"}`},
	"/v1/trips/{id}/start":               {"requested_trip", ""},
	"/v1/trips/{id}/cancel":              {"requested_trip", ""},
	"/v1/trips/{id}/refund":              {"trip", ""},
	"/v1/trips/{id}/end":                 {"requested_trip", `{"fare":1000}`},
	"/v1/wallets/{user_id}/credits":      {"user", `{"amount":100,"currency":"USD"}`},
	"/v1/admin/webhooks":                 {"", `{"url":"https://shop.example/hooks","topics":["order.paid"]}`},
	"/v1/admin/sagas/{id}/redrive":       {"saga", ""},
	"/v1/admin/orders/{id}/reconcile":    {"order", ""},
	"/v1/admin/outbox/dead/redrive":      {"", `{"topic":"order.paid"}`},
	"/v1/admin/outbox/dead/{id}/redrive": {"outbox_message", ""},
	"/v1/admin/outbox/dead/{id}/discard": {"outbox_message", `{"reason":"test"}`},
	"/v1/payments/callback":              {"-", ""},
	"/v1/channels/{channel}/webhook":     {"-", ""},
}

// TestEveryPostIsIdempotent: every POST route (but the signed callbacks), sent twice with
// one Idempotency-Key and body, answers the second time what it answered the first, marked
// Idempotent-Replayed: true, and changes nothing more; sent with that key and another body
// it answers 422 idempotency-key-reused. A route missing from postTargets fails the test.
func TestEveryPostIsIdempotent(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	var patterns []string
	if err := chi.Walk(g.h.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodPost {
			patterns = append(patterns, pattern)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, pattern := range patterns {
		tg, ok := postTargets[pattern]
		if !ok {
			t.Errorf("POST %s: not in postTargets; give it a request", pattern)
			continue
		}
		if tg.kind == "-" {
			continue
		}
		tag := fmt.Sprint("k", i)
		ids := g.objects(t, tag)
		fill := strings.NewReplacer("{deal}", ids["deal"], "{tag}", tag).Replace
		target, body := pattern, fill(tg.body)
		if open := strings.Index(pattern, "{"); open >= 0 {
			target = pattern[:open] + ids[tg.kind] + pattern[strings.Index(pattern, "}")+1:]
		}
		key := "every-post-" + fmt.Sprint(i)
		first := g.sendKey(http.MethodPost, target, body, key)
		second := g.sendKey(http.MethodPost, target, body, key)
		code := problemCode(first)
		if first.Code >= 500 || code == orderly.EINVALID || code == orderly.ECONFLICT {
			t.Errorf("POST %s = %d %s: want an answer that is kept; fix its postTargets request", pattern, first.Code, first.Body)
			continue
		}
		if second.Header().Get(httpapi.IdempotentReplayedHeader) != "true" {
			t.Errorf("POST %s again: %s = %q, want true (first %d, again %d %s)", pattern, httpapi.IdempotentReplayedHeader,
				second.Header().Get(httpapi.IdempotentReplayedHeader), first.Code, second.Code, second.Body)
		}
		wantCode := first.Code
		if first.Code == http.StatusCreated && slices.Contains(keyedInService, pattern) {
			wantCode = http.StatusOK
		}
		if second.Code != wantCode || !sameJSON(first.Body.Bytes(), second.Body.Bytes()) {
			t.Errorf("POST %s again = %d %s, want %d %s", pattern, second.Code, second.Body, wantCode, first.Body)
		}
		other := g.sendKey(http.MethodPost, target, fill(otherBody(pattern, body)), key)
		if other.Code != http.StatusUnprocessableEntity || problemCode(other) != orderly.EIDEMPOTENCY {
			t.Errorf("POST %s with the key and another body = %d %s, want 422 %s", pattern, other.Code, other.Body, orderly.EIDEMPOTENCY)
		}
	}
}

// keyedInService are the routes whose service keeps the key: a replay of a create answers
// 200 with the resource (httpapi's keyedInService).
var keyedInService = []string{"/v1/orders", "/v1/orders/{id}/refunds", "/v1/groups", "/v1/groups/{id}/join", "/v1/wallets/{user_id}/credits"}

// otherBodies are other requests of the routes whose service keeps the key (it compares
// what it reads of a body, not the bytes).
var otherBodies = map[string]string{
	"/v1/orders":                    `{"user_id":"buyer-{tag}","currency":"USD","items":[{"sku":"SKU-{tag}","quantity":2,"unit_price":1000}]}`,
	"/v1/orders/{id}/refunds":       `{"amount":200}`,
	"/v1/groups":                    `{"deal_id":"{deal}","user_id":"opener","quantity":2}`,
	"/v1/groups/{id}/join":          `{"user_id":"joiner","quantity":2}`,
	"/v1/wallets/{user_id}/credits": `{"amount":200,"currency":"USD"}`,
}

// otherBody is another request to pattern than body: a field added, or otherBodies'.
func otherBody(pattern, body string) string {
	if o, ok := otherBodies[pattern]; ok {
		return o
	}
	if body == "" {
		return `{"note":"other"}`
	}
	return strings.TrimSuffix(body, "}") + `,"note":"other"}`
}

func problemCode(rec *httptest.ResponseRecorder) string {
	var p httpapi.Problem
	if rec.Code < 400 || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
		return ""
	}
	return strings.TrimPrefix(p.Type, httpapi.ProblemTypeBase)
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// TestRetriedTripHoldsOnce: a POST /v1/trips sent again (its answer lost) is one trip
// with one card hold, and a new key is a new trip; a coupon the same.
func TestRetriedTripHoldsOnce(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	trip := `{"rider_id":"rider-once","currency":"USD","estimate":4000}`
	a := g.sendKey(http.MethodPost, "/v1/trips", trip, "trip-1")
	b := g.sendKey(http.MethodPost, "/v1/trips", " "+trip+"\n", "trip-1") // the same request, encoded again
	c := g.sendKey(http.MethodPost, "/v1/trips", trip, "trip-2")
	ida, idb, idc := field(t, a, "id"), field(t, b, "id"), field(t, c, "id")
	if a.Code != 201 || b.Code != 201 || ida != idb || idc == ida {
		t.Errorf("trips: %d %s, again %d %s, new key %d %s; want one trip for trip-1, another for trip-2", a.Code, ida, b.Code, idb, c.Code, idc)
	}
	if got := b.Header().Get("Location"); got != a.Header().Get("Location") || got == "" {
		t.Errorf("replay Location = %q, want %q", got, a.Header().Get("Location"))
	}
	coupon := `{"user_id":"buyer-once","amount_off":100,"currency":"USD"}`
	x, y := g.sendKey(http.MethodPost, "/v1/coupons", coupon, "coupon-1"), g.sendKey(http.MethodPost, "/v1/coupons", coupon, "coupon-1")
	if field(t, x, "id") != field(t, y, "id") {
		t.Errorf("coupon sent again = %s, want %s", y.Body, x.Body)
	}
	// Without a key nothing is kept: two coupons.
	if p, q := g.sendKey(http.MethodPost, "/v1/coupons", coupon, ""), g.sendKey(http.MethodPost, "/v1/coupons", coupon, ""); field(t, p, "id") == field(t, q, "id") {
		t.Errorf("two coupons without a key have one id %s", field(t, p, "id"))
	}
	// A refused request is not kept: the key serves the corrected one.
	bad := g.sendKey(http.MethodPost, "/v1/coupons", `{"user_id":"buyer-once","amount_off":-1,"currency":"USD"}`, "coupon-2")
	good := g.sendKey(http.MethodPost, "/v1/coupons", coupon, "coupon-2")
	if bad.Code != 422 || good.Code != 201 {
		t.Errorf("refused then corrected under one key = %d, %d %s; want 422, 201", bad.Code, good.Code, good.Body)
	}
}

func field(t *testing.T, rec *httptest.ResponseRecorder, name string) string {
	t.Helper()
	var v map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &v)
	s, _ := v[name].(string)
	if s == "" {
		t.Errorf("no %s in %d %s", name, rec.Code, rec.Body)
	}
	return s
}

// blockingCatalog holds CreateCoupon until release is closed.
type blockingCatalog struct {
	orderly.CatalogService
	entered chan struct{}
	release chan struct{}
}

func (c *blockingCatalog) CreateCoupon(ctx context.Context, p *orderly.CreateCouponParams) (*orderly.Coupon, error) {
	c.entered <- struct{}{}
	<-c.release
	return c.CatalogService.CreateCoupon(ctx, p)
}

// TestIdempotencyKeyInFlight: while a request runs, the same request with its key answers
// 409 idempotency-key-in-flight with Retry-After and changes nothing; once the first
// answered, the key answers its answer. A claim whose request never answered (its instance
// died) lapses after the lease, and the request sent again runs.
func TestIdempotencyKeyInFlight(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			env := enginetest.New(t, enginetest.Options{Dialect: dialect})
			idem, err := idempotency.New(idempotency.Config{Store: env.Store, Lease: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			cat := &blockingCatalog{CatalogService: env.Orders, entered: make(chan struct{}, 1), release: make(chan struct{})}
			h := httpapi.New(httpapi.Config{Orders: env.Orders, Payments: env.Payments, Catalog: cat, Idempotency: idem}).Handler()
			post := func(key string) *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/v1/coupons", strings.NewReader(`{"user_id":"u1","amount_off":100,"currency":"USD"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(httpapi.IdempotencyKeyHeader, key)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				return rec
			}
			var wg sync.WaitGroup
			var first *httptest.ResponseRecorder
			wg.Go(func() { first = post("k1") })
			<-cat.entered
			busy := post("k1")
			if busy.Code != http.StatusConflict || problemCode(busy) != orderly.EIDEMPOTENCYINFLIGHT || busy.Header().Get("Retry-After") != "1" {
				t.Errorf("the key while its request runs = %d %s (Retry-After %q), want 409 %s, Retry-After 1",
					busy.Code, busy.Body, busy.Header().Get("Retry-After"), orderly.EIDEMPOTENCYINFLIGHT)
			}
			close(cat.release)
			wg.Wait()
			again := post("k1")
			if first.Code != 201 || again.Code != 201 || again.Body.String() != first.Body.String() {
				t.Errorf("first = %d %s, again = %d %s; want 201 and the same answer", first.Code, first.Body, again.Code, again.Body)
			}

			// A claim that never answered: made here as a dead instance would have left it.
			body := []byte(`{"user_id":"u1","amount_off":100,"currency":"USD"}`)
			if _, _, err := idem.Begin(t.Context(), "POST /v1/coupons", "k2",
				idempotency.RequestHash(http.MethodPost, "/v1/coupons", body)); err != nil {
				t.Fatal(err)
			}
			cat.entered = make(chan struct{}, 2)
			if rec := post("k2"); rec.Code != http.StatusConflict {
				t.Errorf("the key of a claim in its lease = %d %s, want 409", rec.Code, rec.Body)
			}
			env.Clock.Advance(time.Second) // the database clock of the engine's store
			if rec := post("k2"); rec.Code != http.StatusCreated || len(cat.entered) != 1 {
				t.Errorf("the key of a lapsed claim = %d %s (%d runs), want 201 from one run", rec.Code, rec.Body, len(cat.entered))
			}
		})
	}
}
