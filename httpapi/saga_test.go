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
	extra    *saga.Instance // a second saga, listed by ListStuck only
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

// ListStuck lists the one saga while it is stuck and its id is after afterID; the fake's
// extra stuck saga "s-2", when set, follows it.
func (f *fakeSagas) ListStuck(_ context.Context, afterID string, limit int) ([]*saga.Instance, error) {
	var out []*saga.Instance
	for _, in := range []*saga.Instance{f.inst, f.extra} {
		if in != nil && in.State == saga.StateStuck && in.ID > afterID && len(out) < limit {
			out = append(out, in)
		}
	}
	return out, nil
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

// TestStuckSagasRoute: GET /v1/admin/sagas/stuck lists the stuck sagas without their step
// log, pages with the cursor, needs the admin token and is 404 without sagas.
func TestStuckSagasRoute(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 33, 7, 0, time.UTC)
	stuck := func(id string) *saga.Instance {
		return &saga.Instance{ID: id, Definition: "checkout", State: saga.StateStuck, CurrentStep: 1, Input: json.RawMessage(`{}`),
			Attempts: 10, LastError: "wallet: 500", CreatedAt: at, UpdatedAt: at, Version: 3}
	}
	fake := &fakeSagas{inst: stuck("s-1"), extra: stuck("s-2")}
	f := setup(t, func(cfg *Config) { cfg.Sagas, cfg.AdminToken = fake, "tok" })
	list := func(query string) (int, []string, string) {
		t.Helper()
		req := newRequest(http.MethodGet, "/v1/admin/sagas/stuck"+query, "")
		req.Header.Set("Authorization", "Bearer tok")
		rec := f.do(req)
		var body struct {
			Sagas []struct {
				ID        string `json:"id"`
				State     string `json:"state"`
				LastError string `json:"last_error"`
				Steps     []any  `json:"steps"`
			} `json:"sagas"`
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		var ids []string
		for _, s := range body.Sagas {
			if s.State != "stuck" || s.LastError != "wallet: 500" || s.Steps == nil || len(s.Steps) != 0 {
				t.Errorf("saga %+v: want stuck, its last error and steps []", s)
			}
			ids = append(ids, s.ID)
		}
		return rec.Code, ids, body.NextCursor
	}
	code, ids, next := list("")
	if code != http.StatusOK || len(ids) != 2 || ids[0] != "s-1" || ids[1] != "s-2" || next != "" {
		t.Errorf("all = %d %v next %q, want [s-1 s-2] and no next page", code, ids, next)
	}
	code, ids, next = list("?limit=1")
	if code != http.StatusOK || len(ids) != 1 || ids[0] != "s-1" || next == "" {
		t.Fatalf("first page = %d %v next %q, want [s-1] and a cursor", code, ids, next)
	}
	if code, ids, next = list("?limit=1&cursor=" + next); code != http.StatusOK || len(ids) != 1 || ids[0] != "s-2" || next != "" {
		t.Errorf("second page = %d %v next %q, want [s-2], the last", code, ids, next)
	}
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/admin/sagas/stuck", "")), http.StatusUnauthorized, orderly.EUNAUTHORIZED)
	bad := newRequest(http.MethodGet, "/v1/admin/sagas/stuck?limit=0", "")
	bad.Header.Set("Authorization", "Bearer tok")
	assertProblem(t, f.do(bad), http.StatusUnprocessableEntity, orderly.EINVALID)

	off := setup(t, func(cfg *Config) { cfg.AdminToken = "tok" })
	req := newRequest(http.MethodGet, "/v1/admin/sagas/stuck", "")
	req.Header.Set("Authorization", "Bearer tok")
	assertProblem(t, off.do(req), http.StatusNotFound, orderly.ENOTFOUND)
}
