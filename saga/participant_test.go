package saga_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/saga"
)

// TestHTTPParticipant: 2xx is success, 409 and 422 are business failures, other statuses
// and timeouts are transient; every retry carries the operation's Idempotency-Key; the
// circuit breaker opens after BreakerFailures transient failures in a row (then calls fail
// without reaching the participant), and business failures do not trip it.
func TestHTTPParticipant(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		status = http.StatusOK
		keys   []string
		bodies []saga.Call
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		var c saga.Call
		_ = json.NewDecoder(r.Body).Decode(&c)
		bodies = append(bodies, c)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	rec := &recorder{}
	p, err := saga.HTTP(saga.HTTPConfig{Name: "gateway", URL: srv.URL, BreakerFailures: 3, BreakerOpen: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	def := saga.Definition{Name: "remote", Steps: []saga.Step{{Name: "capture", Action: p, Compensation: rec.ok(),
		Retry: saga.RetryPolicy{InitialInterval: time.Millisecond, RandomizationFactor: -1, Deadline: time.Hour}}}}
	e, _ := start(t, newStore(t), def)
	run := func(code int) *saga.Instance {
		mu.Lock()
		status, keys, bodies = code, nil, nil
		mu.Unlock()
		inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "remote", Input: json.RawMessage(`{"fare":3820}`)})
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	for _, c := range []struct {
		code int
		want saga.State
	}{{200, saga.StateSucceeded}, {204, saga.StateSucceeded}, {409, saga.StateCompensated}, {422, saga.StateCompensated}} {
		if inst := run(c.code); inst.State != c.want {
			t.Fatalf("status %d: saga %s, want %s", c.code, inst.State, c.want)
		}
		mu.Lock()
		if len(bodies) != 1 || bodies[0].Phase != saga.PhaseAction || string(bodies[0].Input) != `{"fare":3820}` || keys[0] != bodies[0].IdempotencyKey {
			t.Fatalf("status %d: request %+v key %v", c.code, bodies, keys)
		}
		mu.Unlock()
	}
	// 503 three times: transient, retried with the same key, then the breaker opens and
	// the next attempts fail without a request.
	inst := run(http.StatusServiceUnavailable)
	if inst.State != saga.StateRunning {
		t.Fatalf("after a 503: %s, want running (retrying)", inst.State)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, log, err := e.orch.Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) >= 5 {
			mu.Lock()
			n, ks := len(keys), slices.Clone(keys)
			mu.Unlock()
			if n != 3 {
				t.Fatalf("%d requests reached the participant, want 3 (then the breaker is open)", n)
			}
			for _, k := range ks {
				if k != inst.ID+"/capture/action" {
					t.Fatalf("keys %v, want %s each time", ks, inst.ID+"/capture/action")
				}
			}
			if !strings.Contains(log[4].Error, "circuit breaker") || got.State != saga.StateRunning {
				t.Fatalf("attempt 5: %q, saga %s", log[4].Error, got.State)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d attempts after 10 s", len(log))
		}
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
	if _, err := saga.HTTP(saga.HTTPConfig{Name: "x"}); err == nil {
		t.Fatal("an HTTP participant without a URL was accepted")
	}
}
