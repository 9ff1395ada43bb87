package engine_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
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
