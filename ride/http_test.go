package ride_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"encoding/json"
)

// TestTripOverHTTP: a trip moves through its events over the API; an event its state does
// not take is a 409 problem of type illegal-transition, bad input a 422 invalid-input, an
// unknown trip a 404, and the trip's payment saga is readable at /v1/sagas/{id}.
func TestTripOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		b.e.Handler().ServeHTTP(rec, req)
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %d %q", method, path, rec.Code, rec.Body)
		}
		return rec.Code, out
	}
	code, tr := do(http.MethodPost, "/v1/trips", `{"rider_id":"rider-h","currency":"USD","estimate":4000}`)
	if code != 201 || tr["state"] != "requested" || tr["hold_amount"] != 5000.0 {
		t.Fatalf("create: %d %v", code, tr)
	}
	id := tr["id"].(string)
	code, p := do(http.MethodPost, "/v1/trips/"+id+"/start", "")
	if code != 409 || p["type"] != "https://orderly.dev/problems/illegal-transition" {
		t.Fatalf("start of a requested trip: %d %v", code, p)
	}
	if code, p = do(http.MethodPost, "/v1/trips", `{"rider_id":"r","currency":"USD","estimate":-1}`); code != 422 || !strings.HasSuffix(p["type"].(string), "/invalid-input") {
		t.Fatalf("negative estimate: %d %v", code, p)
	}
	if code, _ = do(http.MethodGet, "/v1/trips/nope", ""); code != 404 {
		t.Fatalf("unknown trip: %d", code)
	}
	for _, step := range []struct{ path, body, want string }{
		{"/assign", `{"driver_id":"driver-h"}`, "driver_assigned"},
		{"/start", "", "in_trip"},
		{"/end", `{"fare":3820}`, "settled"},
	} {
		if code, tr = do(http.MethodPost, "/v1/trips/"+id+step.path, step.body); code != 200 || tr["state"] != step.want {
			t.Fatalf("%s: %d %v, want 200 %s", step.path, code, tr, step.want)
		}
	}
	if tr["captured"] != 3820.0 || tr["released"] != 1180.0 || tr["driver_payout"] != 3056.0 {
		t.Fatalf("ended trip %v", tr)
	}
	code, sg := do(http.MethodGet, "/v1/sagas/"+tr["payment_saga_id"].(string), "")
	if code != 200 || sg["state"] != "succeeded" || sg["definition"] != "ride_payment" {
		t.Fatalf("payment saga: %d %v", code, sg)
	}
	if code, p = do(http.MethodPost, "/v1/trips/"+id+"/end", `{"fare":0}`); code != 422 {
		t.Fatalf("fare 0: %d %v", code, p)
	}
}
