package wallet_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// do sends a request with a JSON body (nil: none) and an Idempotency-Key (when key is set)
// and returns the status and the decoded answer.
func do(t *testing.T, method, url, key string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set(httpapi.IdempotencyKeyHeader, key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, undecodable body: %v", method, url, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// TestWalletOverHTTP: a top-up is idempotent per key over the API; the wallet shows its
// balance and entries; errors are problems with stable types.
func TestWalletOverHTTP(t *testing.T) {
	t.Parallel()
	s := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: []byte("secret")})
	credits := s.URL + "/v1/wallets/merchant-7/credits"
	code, first := do(t, http.MethodPost, credits, "topup-1", map[string]any{"amount": 2500, "currency": "USD"})
	if code != 201 || first["amount"] != float64(2500) || first["kind"] != "credit" || first["counterparty_id"] != "system:USD:external" {
		t.Fatalf("credit: %d %v", code, first)
	}
	code, again := do(t, http.MethodPost, credits, "topup-1", map[string]any{"amount": 2500, "currency": "USD"})
	if code != 200 || again["id"] != first["id"] {
		t.Errorf("replay: %d %v, want 200 with id %v", code, again, first["id"])
	}
	problems := []struct {
		name, key string
		body      any
		status    int
		code      string
	}{
		{"same key, other amount", "topup-1", map[string]any{"amount": 9999, "currency": "USD"}, 422, orderly.EIDEMPOTENCY},
		{"no key", "", map[string]any{"amount": 1, "currency": "USD"}, 422, orderly.EINVALID},
		{"zero amount", "k0", map[string]any{"amount": 0, "currency": "USD"}, 422, orderly.EINVALID},
		{"unknown field", "k1", map[string]any{"amount": 1, "currency": "USD", "note": "x"}, 422, orderly.EINVALID},
	}
	for _, p := range problems {
		code, body := do(t, http.MethodPost, credits, p.key, p.body)
		if code != p.status || body["type"] != httpapi.ProblemTypeBase+p.code {
			t.Errorf("%s: %d %v, want %d %s", p.name, code, body, p.status, p.code)
		}
		// The ledger keys a top-up by a hash of the user and the client's key; the answer
		// names the client's key, not the hash.
		if detail, _ := body["detail"].(string); p.code == orderly.EIDEMPOTENCY &&
			(!strings.Contains(detail, `"topup-1"`) || strings.Contains(detail, "http-credit")) {
			t.Errorf("%s: detail %q, want the client's key topup-1 named", p.name, detail)
		}
	}
	if code, _ := do(t, http.MethodPost, credits, "topup-2", map[string]any{"amount": 500, "currency": "USD"}); code != 201 {
		t.Fatalf("second credit: %d", code)
	}
	code, w := do(t, http.MethodGet, s.URL+"/v1/wallets/merchant-7?limit=1", "", nil)
	if code != 200 || w["balance"] != float64(3000) || w["held"] != float64(0) || w["currency"] != "USD" {
		t.Fatalf("wallet: %d %v", code, w)
	}
	entries := w["entries"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["amount"] != float64(500) || w["next_before"] == nil {
		t.Fatalf("first page: %v (next_before %v)", entries, w["next_before"])
	}
	code, w2 := do(t, http.MethodGet, s.URL+"/v1/wallets/merchant-7?currency=USD&before="+jsonNumber(w["next_before"]), "", nil)
	if e := w2["entries"].([]any); code != 200 || len(e) != 1 || e[0].(map[string]any)["amount"] != float64(2500) || w2["next_before"] != nil {
		t.Fatalf("second page: %d %v", code, w2)
	}
	if code, body := do(t, http.MethodGet, s.URL+"/v1/wallets/nobody", "", nil); code != 404 || body["type"] != httpapi.ProblemTypeBase+orderly.ENOTFOUND {
		t.Errorf("unknown wallet: %d %v", code, body)
	}
	if code, _ := do(t, http.MethodGet, s.URL+"/v1/wallets/merchant-7?before=x", "", nil); code != 422 {
		t.Errorf("bad cursor: %d, want 422", code)
	}
}

// TestEngineExpiresHolds: the engine's closer (its precise timer, re-armed by the hold)
// expires a wallet hold at its deadline and releases the amount.
func TestEngineExpiresHolds(t *testing.T) {
	t.Parallel()
	s := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: []byte("secret")})
	svc := s.Engine.Wallets()
	ctx := t.Context()
	if _, err := svc.Credit(ctx, &orderly.WalletMoveParams{UserID: "rider", Currency: "EUR", Amount: 900, IdempotencyKey: "c"}); err != nil {
		t.Fatal(err)
	}
	h, _, err := svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "EUR", Amount: 700, TTL: 200 * time.Millisecond, IdempotencyKey: "h"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := svc.GetHold(ctx, h.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == orderly.HoldExpired {
			if got.ResolvedAt.Before(h.ExpiresAt) {
				t.Errorf("expired at %s, before its expires_at %s", got.ResolvedAt, h.ExpiresAt)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hold still %s 10 s after its expiry", got.State)
		}
		<-tick.C
	}
	w, err := svc.Wallet(ctx, "rider", "EUR", nil)
	if err != nil || w.Account.Available != 900 || w.Account.Held != 0 {
		t.Fatalf("wallet after the expiry: %+v, %v", w, err)
	}
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
