package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// TestEngineSagas: the embedder's saga definitions run on the engine's orchestrator; a
// transient failure is retried by the engine's one timer (no other), and GET
// /v1/sagas/{id} shows the saga and its log.
func TestEngineSagas(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	cfg := config(t)
	cfg.Sagas = []saga.Definition{{Name: "two", Steps: []saga.Step{
		{Name: "write", Action: saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			_, err := tx.Now(ctx) // a local participant in the recording transaction
			return err
		})},
		{Name: "flaky", Action: saga.Local(func(context.Context, *saga.Call) error {
			if calls.Add(1) == 1 {
				return errors.New("first call fails")
			}
			return nil
		}), Retry: saga.RetryPolicy{InitialInterval: 10 * time.Millisecond, RandomizationFactor: -1}},
	}}}
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	inst, err := e.Sagas().Run(t.Context(), &saga.StartParams{Definition: "two", Input: json.RawMessage(`{"k":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != saga.StateRunning || inst.CurrentStep != 1 {
		t.Fatalf("after Run: %s at step %d, want running at 1 (waiting for the retry)", inst.State, inst.CurrentStep)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, err := e.Sagas().Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == saga.StateSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga %s after 10 s", got.State)
		}
		time.Sleep(5 * time.Millisecond) // polling the condition
	}
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/sagas/"+inst.ID, nil))
	var body struct {
		State string `json:"state"`
		Steps []struct {
			StepName string `json:"step_name"`
			Outcome  string `json:"outcome"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); rec.Code != 200 || err != nil {
		t.Fatalf("GET: %d %s", rec.Code, rec.Body)
	}
	if body.State != "succeeded" || len(body.Steps) != 3 || body.Steps[1].Outcome != "transient" || body.Steps[2].Outcome != "succeeded" {
		t.Fatalf("GET body %s", rec.Body)
	}
	if _, err := engine.Open(t.Context(), func() engine.Config {
		c := config(t)
		c.Sagas = []saga.Definition{{Name: "bad"}}
		return c
	}(), features.All()...); err == nil {
		t.Fatal("a definition without steps was accepted")
	}
}
