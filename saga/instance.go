package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Instance is a saga instance as the API shows it. Times are UTC.
type Instance struct {
	ID         string `json:"id"`
	Definition string `json:"definition"`
	State      State  `json:"state"`
	// CurrentStep is the index of the step whose action (running) or compensation
	// (compensating, stuck) is next or in flight; the number of steps once succeeded, -1
	// once compensated.
	CurrentStep int             `json:"current_step"`
	Input       json.RawMessage `json:"input"`
	// WakeAt is when the current step is due: a retry time or the end of the lease of the
	// attempt in flight; nil once ended or stuck.
	WakeAt *time.Time `json:"wake_at,omitempty"`
	// StepDeadline is when the current action's retries end; nil outside an action.
	StepDeadline *time.Time `json:"step_deadline,omitempty"`
	Attempts     int        `json:"attempts"` // of the current step and phase
	LastError    string     `json:"last_error,omitempty"`
	CreatedAt    time.Time  `json:"created_at"`
	UpdatedAt    time.Time  `json:"updated_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	Version      int64      `json:"version"`

	kept any // Kept
}

// Kept returns what the saga's last action kept (Call.Keep) when the Run that returned
// this instance ended the saga in its first run of local steps, in the caller's
// transaction; nil otherwise. It is a value of this process, never persisted: the wallet
// checkout answers the order its pay step wrote without reading it back.
func (i *Instance) Kept() any { return i.kept }

// StepRecord is one attempt in the saga log.
type StepRecord struct {
	Step           int       `json:"step"`
	StepName       string    `json:"step_name"`
	Phase          Phase     `json:"phase"`
	Attempt        int       `json:"attempt"`
	Outcome        Outcome   `json:"outcome"`
	IdempotencyKey string    `json:"idempotency_key"`
	StartedAt      time.Time `json:"started_at"`
	EndedAt        time.Time `json:"ended_at"`
	// RetryAt is when the next attempt is due, after a transient or lost attempt that is
	// retried; nil otherwise.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	Error   string     `json:"error,omitempty"`
}

func newInstance(s *store.SagaInstance) *Instance {
	return &Instance{ID: s.ID, Definition: s.Definition, State: State(s.State), CurrentStep: s.CurrentStep,
		Input: json.RawMessage(s.Input), WakeAt: s.WakeAt, StepDeadline: s.StepDeadline, Attempts: s.Attempts,
		LastError: s.LastError, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt, Version: s.Version}
}

// Get returns an instance and its step log, oldest attempt first; ENOTFOUND if there is none.
func (o *Orchestrator) Get(ctx context.Context, id string) (*Instance, []*StepRecord, error) {
	var (
		s     *store.SagaInstance
		steps []*store.SagaStep
	)
	err := o.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		if s, err = tx.SagaGet(ctx, id); err != nil {
			return err
		}
		steps, err = tx.SagaSteps(ctx, id)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	log := make([]*StepRecord, len(steps))
	for i, st := range steps {
		log[i] = &StepRecord{Step: st.Step, StepName: st.StepName, Phase: Phase(st.Phase), Attempt: st.Attempt,
			Outcome: Outcome(st.Outcome), IdempotencyKey: st.IdempotencyKey, StartedAt: st.StartedAt, EndedAt: st.EndedAt, RetryAt: st.RetryAt, Error: st.Error}
	}
	return newInstance(s), log, nil
}

// ListStuck returns up to limit stuck instances with id > afterID, by id.
func (o *Orchestrator) ListStuck(ctx context.Context, afterID string, limit int) ([]*Instance, error) {
	var out []*Instance
	err := o.cfg.Store.Read(ctx, func(tx store.Tx) error {
		list, err := tx.SagaList(ctx, string(StateStuck), &store.ListParams{AfterID: afterID, Limit: limit})
		for _, s := range list {
			out = append(out, newInstance(s))
		}
		return err
	})
	return out, err
}

// Actor is who re-drives a saga, written to the operator_actions audit with the re-drive.
type Actor struct {
	Operator string // "admin" when empty
	Reason   string
	TraceID  string
}

// ActionRedrive is the audit action of a re-drive (the same word as a dead letter's).
const ActionRedrive = "redrive"

// Redrive is RedriveBy for the operator "admin" without a reason.
func (o *Orchestrator) Redrive(ctx context.Context, id string) (*Instance, error) {
	return o.RedriveBy(ctx, id, Actor{})
}

// RedriveBy resumes a stuck saga: it compensates again from the step that was stuck, with
// its attempts counted from zero, due now (the timer runs it), and audits it in
// operator_actions (action "redrive", target the saga id) in the same transaction. It
// returns the instance as re-driven. Errors: ENOTFOUND when there is no such saga;
// ESAGANOTSTUCK when it is not stuck (a saga that is running or compensating is not
// re-driven: it is on its way).
func (o *Orchestrator) RedriveBy(ctx context.Context, id string, by Actor) (*Instance, error) {
	var s *store.SagaInstance
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		var err error
		if s, err = tx.SagaLock(ctx, id); err != nil {
			return err
		}
		if State(s.State) != StateStuck {
			return orderly.Errorf(orderly.ESAGANOTSTUCK, "saga %s is %s, not stuck", id, s.State)
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		s.State, s.Attempts, s.AttemptStartedAt, s.WakeAt, s.UpdatedAt = string(StateCompensating), 0, nil, &now, now
		stuckStep := s.CurrentStep
		ok, err := tx.SagaUpdate(ctx, s)
		if err == nil && !ok {
			err = fmt.Errorf("redrive saga %s: changed concurrently", id)
		}
		if err != nil {
			return err
		}
		detail, err := json.Marshal(map[string]any{"saga": s.Definition, "step": stuckStep})
		if err != nil {
			return err
		}
		return tx.OperatorActionInsert(ctx, &store.OperatorAction{At: now, Operator: cmp.Or(by.Operator, "admin"),
			Action: ActionRedrive, Target: id, Reason: by.Reason, Detail: detail, TraceID: by.TraceID})
	})
	if err != nil {
		return nil, err
	}
	o.cfg.Logger.InfoContext(ctx, "saga re-driven", "saga_id", id, "step", s.CurrentStep)
	o.cfg.Signals.Deadline(ctx, *s.WakeAt)
	return newInstance(s), nil
}
