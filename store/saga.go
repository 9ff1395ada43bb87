package store

import (
	"context"
	"time"
)

// SagaTx holds the queries of saga instances and their step log (package saga). It is part
// of Tx.
//
// An instance running or compensating waits on the one timer through wake_at (see
// SagaInstance.WakeAt); Version is the fencing token of an attempt: every method that
// changes an instance bumps it and is guarded by the version the caller read, so a runner
// whose lease was taken over records nothing.
type SagaTx interface {
	// SagaInsert writes a new instance (Version becomes 1). ECONFLICT when the id exists.
	SagaInsert(ctx context.Context, s *SagaInstance) error
	// SagaGet returns an instance; ENOTFOUND if there is none.
	SagaGet(ctx context.Context, id string) (*SagaInstance, error)
	// SagaLock returns an instance with its row locked until the transaction ends (where
	// the dialect has row locks; SQLite has one writer); ENOTFOUND if there is none.
	SagaLock(ctx context.Context, id string) (*SagaInstance, error)
	// SagasDue claims up to limit running or compensating instances whose wake_at <= now,
	// earliest first, locking them where the dialect can (FOR UPDATE SKIP LOCKED).
	SagasDue(ctx context.Context, now time.Time, limit int) ([]*SagaInstance, error)
	// SagaUpdate writes every mutable field of s (state, current step, wake_at, step
	// deadline, attempts, attempt start, last error, updated_at, ended_at) and bumps the
	// version, guarded by s.Version = the stored version; on success s.Version is the new
	// version. It reports whether the row changed (false: another runner changed it first).
	SagaUpdate(ctx context.Context, s *SagaInstance) (bool, error)
	// SagaNextWakeAt returns the earliest wake_at among running or compensating instances;
	// ok=false if none.
	SagaNextWakeAt(ctx context.Context) (wakeAt time.Time, ok bool, err error)
	// SagasOverdueCount counts running or compensating instances whose wake_at < before.
	SagasOverdueCount(ctx context.Context, before time.Time) (int64, error)
	// SagaList returns up to params.Limit instances in state ("" for any) with id >
	// params.AfterID, by id (keyset pagination).
	SagaList(ctx context.Context, state string, params *ListParams) ([]*SagaInstance, error)
	// SagaStepInsert appends attempts' outcomes to the step log, in the order given (their
	// ids ascend in that order; st.ID is not set), several in one statement.
	SagaStepInsert(ctx context.Context, steps ...*SagaStep) error
	// SagaSteps returns an instance's step log, oldest first.
	SagaSteps(ctx context.Context, sagaID string) ([]*SagaStep, error)
}

// SagaInstance is a persisted saga (package saga documents the states and fields).
type SagaInstance struct {
	ID         string
	Definition string
	State      string // running | compensating | succeeded | compensated | stuck
	// CurrentStep is the index of the step whose action (running) or compensation
	// (compensating, stuck) is next or in flight; len(steps) once succeeded, -1 once
	// compensated.
	CurrentStep int
	Input       []byte // JSON
	// WakeAt is set while running or compensating: when the step is due (a retry time, or
	// the end of the lease of the attempt in flight).
	WakeAt *time.Time
	// StepDeadline is when the current action's retries end (then its outcome is unknown
	// and it is compensated); nil outside an action.
	StepDeadline     *time.Time
	Attempts         int        // attempts of the current step and phase (the last one in flight or done)
	AttemptStartedAt *time.Time // start of the attempt in flight (claimed), nil when none is
	LastError        string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	EndedAt          *time.Time
	Version          int64
}

// SagaStep is one attempt of a step's action or compensation, as the saga log records it.
type SagaStep struct {
	ID             int64
	SagaID         string
	Step           int
	StepName       string
	Phase          string // action | compensation
	Attempt        int
	Outcome        string // succeeded | business_failure | transient | unknown | lost
	IdempotencyKey string
	StartedAt      time.Time
	EndedAt        time.Time
	// RetryAt is when the next attempt of the same step and phase is due, for an attempt
	// that failed and is retried (transient, lost); nil otherwise.
	RetryAt *time.Time
	Error   string
}
