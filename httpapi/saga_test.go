package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/saga"
)

// fakeSagas is a SagaService over one saga.
type fakeSagas struct {
	inst     *saga.Instance
	log      []*saga.StepRecord
	redriven []string
	by       []saga.Actor
}

func (f *fakeSagas) Get(_ context.Context, id string) (*saga.Instance, []*saga.StepRecord, error) {
	if id != f.inst.ID {
		return nil, nil, orderly.Errorf(orderly.ENOTFOUND, "saga %s not found", id)
	}
	return f.inst, f.log, nil
}

func (f *fakeSagas) RedriveBy(_ context.Context, id string, by saga.Actor) (*saga.Instance, error) {
	if id != f.inst.ID {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "saga %s not found", id)
	}
	if f.inst.State != saga.StateStuck {
		return nil, orderly.Errorf(orderly.ESAGANOTSTUCK, "saga %s is %s, not stuck", id, f.inst.State)
	}
	f.redriven = append(f.redriven, id)
	f.by = append(f.by, by)
	f.inst.State = saga.StateCompensating
	return f.inst, nil
}

func TestSagaRoutes(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 33, 7, 123_456_789, time.UTC)
	newFake := func(state saga.State) *fakeSagas {
		return &fakeSagas{
			inst: &saga.Instance{ID: "s-1", Definition: "checkout", State: state, CurrentStep: 1, Input: json.RawMessage(`{"order_id":"o-1"}`),
				Attempts: 10, LastError: "wallet: 500", CreatedAt: at, UpdatedAt: at, Version: 7},
			log: []*saga.StepRecord{{Step: 2, StepName: "wallet", Phase: saga.PhaseAction, Attempt: 1, Outcome: saga.OutcomeBusinessFailure,
				IdempotencyKey: "s-1/wallet/action", StartedAt: at, EndedAt: at.Add(3 * time.Millisecond), Error: "insufficient balance"}},
		}
	}
	cases := []struct {
		name, method, path, auth string
		state                    saga.State
		status                   int
		problem                  string
		wantState                saga.State
		redriven                 int
	}{
		{"get", http.MethodGet, "/v1/sagas/s-1", "Bearer tok", saga.StateStuck, 200, "", saga.StateStuck, 0},
		{"get missing", http.MethodGet, "/v1/sagas/nope", "Bearer tok", saga.StateStuck, 404, orderly.ENOTFOUND, "", 0},
		{"redrive without token", http.MethodPost, "/v1/admin/sagas/s-1/redrive", "", saga.StateStuck, 401, orderly.EUNAUTHORIZED, "", 0},
		{"redrive stuck", http.MethodPost, "/v1/admin/sagas/s-1/redrive", "Bearer tok", saga.StateStuck, 200, "", saga.StateCompensating, 1},
		{"redrive not stuck", http.MethodPost, "/v1/admin/sagas/s-1/redrive", "Bearer tok", saga.StateCompensated, 409, orderly.ESAGANOTSTUCK, "", 0},
		{"redrive missing", http.MethodPost, "/v1/admin/sagas/nope/redrive", "Bearer tok", saga.StateStuck, 404, orderly.ENOTFOUND, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := newFake(c.state)
			f := setup(t, func(cfg *Config) { cfg.Sagas, cfg.AdminToken = fake, "tok" })
			req := newRequest(c.method, c.path, "")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			req.Header.Set(OperatorHeader, "ops-ana")
			rec := f.do(req)
			if len(fake.redriven) != c.redriven {
				t.Fatalf("re-driven %v, want %d", fake.redriven, c.redriven)
			}
			if c.redriven == 1 && fake.by[0].Operator != "ops-ana" {
				t.Fatalf("re-driven by %+v, want the Orderly-Operator header's ops-ana", fake.by[0])
			}
			if c.problem != "" {
				assertProblem(t, rec, c.status, c.problem)
				return
			}
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			steps, _ := got["steps"].([]any)
			if got["id"] != "s-1" || got["state"] != string(c.wantState) || got["created_at"] != "2026-11-30T07:33:07.123Z" ||
				got["input"].(map[string]any)["order_id"] != "o-1" || len(steps) != 1 {
				t.Fatalf("body %s", rec.Body)
			}
			step := steps[0].(map[string]any)
			if step["outcome"] != "business_failure" || step["idempotency_key"] != "s-1/wallet/action" || step["ended_at"] != "2026-11-30T07:33:07.126Z" {
				t.Fatalf("step %v", step)
			}
		})
	}
}

func TestSagaRoutesOff(t *testing.T) {
	t.Parallel()
	rec := setup(t).do(newRequest(http.MethodGet, "/v1/sagas/s-1", ""))
	assertProblem(t, rec, http.StatusNotFound, orderly.ENOTFOUND)
}
