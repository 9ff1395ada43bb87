package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/saga"
)

// SagaService is what the saga routes need: *saga.Orchestrator.
type SagaService interface {
	// Get returns a saga and its step log; ENOTFOUND if there is none.
	Get(ctx context.Context, id string) (*saga.Instance, []*saga.StepRecord, error)
	// RedriveBy resumes a stuck saga and audits it under by; ENOTFOUND, or ESAGANOTSTUCK
	// when it is not stuck.
	RedriveBy(ctx context.Context, id string, by saga.Actor) (*saga.Instance, error)
	// ListStuck returns up to limit stuck sagas with id > afterID, by id.
	ListStuck(ctx context.Context, afterID string, limit int) ([]*saga.Instance, error)
}

var _ SagaService = (*saga.Orchestrator)(nil)

// sagaStepResponse is the JSON of one attempt in the saga log.
type sagaStepResponse struct {
	Step           int          `json:"step"`
	StepName       string       `json:"step_name"`
	Phase          saga.Phase   `json:"phase"`
	Attempt        int          `json:"attempt"`
	Outcome        saga.Outcome `json:"outcome"`
	IdempotencyKey string       `json:"idempotency_key"`
	StartedAt      Time         `json:"started_at"`
	EndedAt        Time         `json:"ended_at"`
	RetryAt        *Time        `json:"retry_at,omitempty"`
	Error          string       `json:"error,omitempty"`
}

// sagaResponse is the JSON of a saga instance, with its step log when read.
type sagaResponse struct {
	ID           string              `json:"id"`
	Definition   string              `json:"definition"`
	State        saga.State          `json:"state"`
	CurrentStep  int                 `json:"current_step"`
	Input        json.RawMessage     `json:"input"`
	WakeAt       *Time               `json:"wake_at,omitempty"`
	StepDeadline *Time               `json:"step_deadline,omitempty"`
	Attempts     int                 `json:"attempts"`
	LastError    string              `json:"last_error,omitempty"`
	CreatedAt    Time                `json:"created_at"`
	UpdatedAt    Time                `json:"updated_at"`
	EndedAt      *Time               `json:"ended_at,omitempty"`
	Version      int64               `json:"version"`
	Steps        []*sagaStepResponse `json:"steps"`
}

func newSagaResponse(in *saga.Instance, log []*saga.StepRecord) *sagaResponse {
	r := &sagaResponse{ID: in.ID, Definition: in.Definition, State: in.State, CurrentStep: in.CurrentStep, Input: in.Input,
		WakeAt: timePtr(in.WakeAt), StepDeadline: timePtr(in.StepDeadline), Attempts: in.Attempts, LastError: in.LastError,
		CreatedAt: Time(in.CreatedAt), UpdatedAt: Time(in.UpdatedAt), EndedAt: timePtr(in.EndedAt), Version: in.Version,
		Steps: make([]*sagaStepResponse, len(log))}
	for i, s := range log {
		r.Steps[i] = &sagaStepResponse{Step: s.Step, StepName: s.StepName, Phase: s.Phase, Attempt: s.Attempt, Outcome: s.Outcome,
			IdempotencyKey: s.IdempotencyKey, StartedAt: Time(s.StartedAt), EndedAt: Time(s.EndedAt), RetryAt: timePtr(s.RetryAt), Error: s.Error}
	}
	return r
}

// getSaga handles GET /v1/sagas/{id}: 200 with the saga and its step log, oldest first.
func (s *Server) getSaga(w http.ResponseWriter, r *http.Request) {
	in, log, err := s.sagas.Get(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newSagaResponse(in, log))
}

// redriveSaga handles POST /v1/admin/sagas/{id}/redrive: 200 with the saga, compensating
// again from its stuck step, and its log; 409 saga-not-stuck when it is not stuck. The
// re-drive is audited under the Orderly-Operator header (GET /v1/admin/actions).
func (s *Server) redriveSaga(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "id")
	by, err := actor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if _, err := s.sagas.RedriveBy(r.Context(), id, saga.Actor{Operator: by.Operator, TraceID: by.TraceID}); err != nil {
		s.writeError(w, r, err)
		return
	}
	in, log, err := s.sagas.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newSagaResponse(in, log))
}

// noSagas answers the saga routes of a server built without a SagaService.
type noSagas struct{}

var errNoSagas = orderly.Errorf(orderly.ENOTFOUND, "sagas are not enabled on this server")

func (noSagas) Get(context.Context, string) (*saga.Instance, []*saga.StepRecord, error) {
	return nil, nil, errNoSagas
}
func (noSagas) RedriveBy(context.Context, string, saga.Actor) (*saga.Instance, error) {
	return nil, errNoSagas
}
func (noSagas) ListStuck(context.Context, string, int) ([]*saga.Instance, error) {
	return nil, errNoSagas
}
