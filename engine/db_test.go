package engine_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/internal/testdb"
)

// TestOpenOnEmbeddersDB: an engine on the embedder's own PostgreSQL pool (Config.DB)
// migrates it and serves orders over its API; Close leaves the pool open for the embedder.
func TestOpenOnEmbeddersDB(t *testing.T) {
	t.Parallel()
	h, err := sql.Open("pgx", testdb.Fresh(t, testdb.URL(t, "postgres")))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	cfg := config(t)
	cfg.DatabaseURL, cfg.DB = "", h
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, req)
		return rec
	}
	if rec := serve(http.MethodPut, "/v1/inventory/sku-1", `{"available":3}`); rec.Code != 200 {
		t.Fatalf("set stock = %d %s", rec.Code, rec.Body)
	}
	if rec := serve(http.MethodPost, "/v1/orders", `{"user_id":"u1","currency":"USD","items":[{"sku":"sku-1","quantity":1,"unit_price":500}]}`); rec.Code != 201 {
		t.Fatalf("create order = %d %s", rec.Code, rec.Body)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	var held int64
	if err := h.QueryRowContext(t.Context(), `SELECT held FROM stock WHERE sku = 'sku-1'`).Scan(&held); err != nil || held != 1 {
		t.Errorf("the embedder's pool after Close: held %d, %v; want 1 and an open pool", held, err)
	}
}

// TestEventsListedAfterDelay: on PostgreSQL, GET /v1/events lists an event once it is 20 s
// old (eventsDelay), so that a page never passes over an event committed out of order; on
// SQLite at once.
func TestEventsListedAfterDelay(t *testing.T) {
	for _, c := range []struct {
		dialect string
		delay   time.Duration
	}{{"sqlite", 0}, {"postgres", 20 * time.Second}} {
		t.Run(c.dialect, func(t *testing.T) {
			t.Parallel()
			e := enginetest.New(t, enginetest.Options{Dialect: c.dialect})
			e.SetStock(t, "SKU-1", 5)
			o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 1, UnitPrice: 100})
			if _, err := e.Orders.CancelOrder(t.Context(), o.ID, "buyer", ""); err != nil {
				t.Fatal(err)
			}
			count := func() int {
				rec := httptest.NewRecorder()
				e.Engine.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/events?order_id="+o.ID, nil))
				var p struct {
					Events []json.RawMessage `json:"events"`
				}
				if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
					t.Fatalf("GET /v1/events = %d %s", rec.Code, rec.Body)
				}
				return len(p.Events)
			}
			if c.delay > 0 {
				e.Clock.Advance(c.delay - time.Millisecond)
				if n := count(); n != 0 {
					t.Errorf("%d events listed %v after the cancel, want 0 before %v", n, c.delay-time.Millisecond, c.delay)
				}
				e.Clock.Advance(time.Millisecond)
			}
			if n := count(); n != 1 {
				t.Errorf("%d events listed %v after the cancel, want its order.closed", n, c.delay)
			}
		})
	}
}
