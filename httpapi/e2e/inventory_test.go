package e2e_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/orderlyhq/orderly"
)

// TestStockAdjustAndList: an adjustment sent twice with its key counts once; removing more
// than is available is 409 out-of-stock and changes nothing; a zero, missing or huge delta
// is 422, an unknown SKU 404; the list pages through every SKU by SKU.
func TestStockAdjustAndList(t *testing.T) {
	t.Parallel()
	g := newIDEngine(t)
	for _, sku := range []string{"inv-c", "inv-a", "inv-b"} {
		g.must(t, 200, http.MethodPut, "/v1/inventory/"+sku, `{"available":10}`, "")
	}
	available := func(sku string) float64 {
		var v map[string]any
		_ = json.Unmarshal(g.send(http.MethodGet, "/v1/inventory/"+sku, "").Body.Bytes(), &v)
		n, _ := v["available"].(float64)
		return n
	}
	for range 2 {
		if rec := g.sendKey(http.MethodPost, "/v1/inventory/inv-a/adjustments", `{"delta":-3}`, "count-1"); rec.Code != 200 {
			t.Fatalf("adjust -3 = %d %s", rec.Code, rec.Body)
		}
	}
	if got := available("inv-a"); got != 7 {
		t.Errorf("available after -3 sent twice with one key = %v, want 7", got)
	}
	g.must(t, 200, http.MethodPost, "/v1/inventory/inv-a/adjustments", `{"delta":5}`, "")
	for _, c := range []struct {
		sku, body string
		status    int
		code      string
	}{
		{"inv-a", `{"delta":-13}`, 409, orderly.EOUTOFSTOCK},
		{"inv-a", `{"delta":0}`, 422, orderly.EINVALID},
		{"inv-a", `{}`, 422, orderly.EINVALID},
		{"inv-a", `{"delta":1000000000000}`, 422, orderly.EINVALID},
		{"inv-none", `{"delta":1}`, 404, orderly.ENOTFOUND},
	} {
		rec := g.send(http.MethodPost, "/v1/inventory/"+c.sku+"/adjustments", c.body)
		if rec.Code != c.status || problemCode(rec) != c.code {
			t.Errorf("adjust %s %s = %d %s, want %d %s", c.sku, c.body, rec.Code, rec.Body, c.status, c.code)
		}
	}
	if got := available("inv-a"); got != 12 {
		t.Errorf("available after the refusals = %v, want 12 (unchanged)", got)
	}

	var skus []string
	after := ""
	for page := 0; page < 5; page++ {
		var p struct {
			Stock     []orderly.Stock `json:"stock"`
			NextAfter string          `json:"next_after"`
		}
		rec := g.send(http.MethodGet, "/v1/inventory?limit=2&after="+after, "")
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil {
			t.Fatalf("list = %d %s", rec.Code, rec.Body)
		}
		for _, st := range p.Stock {
			skus = append(skus, st.SKU)
		}
		if after = p.NextAfter; after == "" {
			break
		}
	}
	if want := []string{"inv-a", "inv-b", "inv-c"}; len(skus) != 3 || skus[0] != want[0] || skus[1] != want[1] || skus[2] != want[2] {
		t.Errorf("SKUs over the pages = %v, want %v", skus, want)
	}
	for _, q := range []string{"?limit=0", "?limit=1001", "?after=%00"} {
		if rec := g.send(http.MethodGet, "/v1/inventory"+q, ""); rec.Code != 422 {
			t.Errorf("list%s = %d %s, want 422", q, rec.Code, rec.Body)
		}
	}
}
