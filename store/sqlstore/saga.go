package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly/store"
)

const sagaColumns = `id, definition, state, current_step, input, wake_at, step_deadline, attempts,
	attempt_started_at, last_error, created_at, updated_at, ended_at, version`

const sagaStepColumns = `id, saga_id, step, step_name, phase, attempt, outcome, idempotency_key, started_at, ended_at, retry_at, error`

// The saga statements are literal per dialect where the dialects differ (the claim); the
// others are the same text everywhere.
var (
	qSagaInsert = sqlText(`INSERT INTO saga_instances (` + sagaColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`)
	qSagaGet  = sqlText(`SELECT ` + sagaColumns + ` FROM saga_instances WHERE id = ?`)
	qSagaLock = newQuery(func(d *dialect) string {
		switch d.name {
		case "sqlite":
			return `SELECT ` + sagaColumns + ` FROM saga_instances WHERE id = ?`
		default: // postgres, mysql
			return `SELECT ` + sagaColumns + ` FROM saga_instances WHERE id = ? FOR UPDATE`
		}
	})
	qSagasDue = newQuery(func(d *dialect) string {
		switch d.name {
		case "sqlite":
			return `SELECT ` + sagaColumns + ` FROM saga_instances
				WHERE wake_at <= ? ORDER BY wake_at LIMIT ?`
		case "postgres":
			return `SELECT ` + sagaColumns + ` FROM saga_instances
				WHERE wake_at <= ? ORDER BY wake_at LIMIT ? FOR UPDATE SKIP LOCKED`
		default: // mysql
			return `SELECT ` + sagaColumns + ` FROM saga_instances FORCE INDEX (saga_instances_wake_at)
				WHERE wake_at <= ? ORDER BY wake_at LIMIT ? FOR UPDATE SKIP LOCKED`
		}
	})
	qSagaUpdate = sqlText(`UPDATE saga_instances SET state = ?, current_step = ?, wake_at = ?, step_deadline = ?,
		attempts = ?, attempt_started_at = ?, last_error = ?, updated_at = ?, ended_at = ?, version = version + 1
		WHERE id = ? AND version = ?`)
	qSagaNextWakeAt    = sqlText(`SELECT MIN(wake_at) FROM saga_instances WHERE wake_at IS NOT NULL`)
	qSagasOverdueCount = sqlText(`SELECT COUNT(*) FROM saga_instances WHERE wake_at < ?`)
	qSagaList          = sqlText(`SELECT ` + sagaColumns + ` FROM saga_instances
		WHERE (? = '' OR state = ?) AND id > ? ORDER BY id LIMIT ?`)
	qSagaStepInsert = sqlText(qSagaStepInsertHead + ` VALUES ` + qSagaStepInsertRow)
	qSagaSteps      = sqlText(`SELECT ` + sagaStepColumns + ` FROM saga_steps WHERE saga_id = ? ORDER BY id`)
)

// SagaInsert implements store.Tx.
func (t *tx) SagaInsert(ctx context.Context, s *store.SagaInstance) error {
	_, err := t.exec(ctx, "saga "+s.ID, qSagaInsert, s.ID, s.Definition, s.State, s.CurrentStep, string(s.Input),
		nullMS(s.WakeAt), nullMS(s.StepDeadline), s.Attempts, nullMS(s.AttemptStartedAt), nullString(s.LastError),
		ms(s.CreatedAt), ms(s.UpdatedAt), nullMS(s.EndedAt))
	if err == nil {
		s.Version = 1
	}
	return err
}

// scanSaga scans one row of sagaColumns.
func scanSaga(r rowScanner) (*store.SagaInstance, error) {
	var (
		s                                store.SagaInstance
		input                            string
		wakeAt, deadline, started, ended sql.NullInt64
		lastError                        sql.NullString
		created, updated                 int64
	)
	err := r.Scan(&s.ID, &s.Definition, &s.State, &s.CurrentStep, &input, &wakeAt, &deadline, &s.Attempts,
		&started, &lastError, &created, &updated, &ended, &s.Version)
	if err != nil {
		return nil, err
	}
	s.Input, s.LastError = []byte(input), lastError.String
	s.WakeAt, s.StepDeadline, s.AttemptStartedAt, s.EndedAt = timePtr(wakeAt), timePtr(deadline), timePtr(started), timePtr(ended)
	s.CreatedAt, s.UpdatedAt = fromMS(created), fromMS(updated)
	return &s, nil
}

// SagaGet implements store.Tx.
func (t *tx) SagaGet(ctx context.Context, id string) (*store.SagaInstance, error) {
	s, err := scanSaga(t.queryRow(ctx, qSagaGet, id))
	return s, translate(err, "saga "+id)
}

// SagaLock implements store.Tx.
func (t *tx) SagaLock(ctx context.Context, id string) (*store.SagaInstance, error) {
	s, err := scanSaga(t.queryRow(ctx, qSagaLock, id))
	return s, translate(t.check(err), "saga "+id)
}

// SagasDue implements store.Tx.
func (t *tx) SagasDue(ctx context.Context, now time.Time, limit int) ([]*store.SagaInstance, error) {
	return t.sagas(ctx, "due sagas", qSagasDue, ms(now), limit)
}

// sagas runs a query of sagaColumns rows.
func (t *tx) sagas(ctx context.Context, what string, q *query, args ...any) ([]*store.SagaInstance, error) {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []*store.SagaInstance
	for rows.Next() {
		s, err := scanSaga(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, t.check(err))
	}
	return out, nil
}

// SagaUpdate implements store.Tx.
func (t *tx) SagaUpdate(ctx context.Context, s *store.SagaInstance) (bool, error) {
	n, err := t.exec(ctx, "saga "+s.ID, qSagaUpdate, s.State, s.CurrentStep, nullMS(s.WakeAt), nullMS(s.StepDeadline),
		s.Attempts, nullMS(s.AttemptStartedAt), nullString(s.LastError), ms(s.UpdatedAt), nullMS(s.EndedAt), s.ID, s.Version)
	if err != nil || n == 0 {
		return false, err
	}
	s.Version++
	return true, nil
}

// SagaNextWakeAt implements store.Tx.
func (t *tx) SagaNextWakeAt(ctx context.Context) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := t.queryRow(ctx, qSagaNextWakeAt).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("saga next wake_at: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(v.Int64), true, nil
}

// SagasOverdueCount implements store.Tx.
func (t *tx) SagasOverdueCount(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	if err := t.queryRow(ctx, qSagasOverdueCount, ms(before)).Scan(&n); err != nil {
		return 0, fmt.Errorf("overdue sagas: %w", err)
	}
	return n, nil
}

// SagaList implements store.Tx.
func (t *tx) SagaList(ctx context.Context, state string, params *store.ListParams) ([]*store.SagaInstance, error) {
	return t.sagas(ctx, "saga list", qSagaList, state, state, params.AfterID, params.Limit)
}

// The step log's INSERT: one row prepared (qSagaStepInsert), several with insertMany.
const (
	qSagaStepInsertHead = `INSERT INTO saga_steps (saga_id, step, step_name, phase, attempt, outcome, idempotency_key,
		started_at, ended_at, retry_at, error)`
	qSagaStepInsertRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// SagaStepInsert implements store.Tx: one row with the prepared statement, several in
// multi-row statements.
func (t *tx) SagaStepInsert(ctx context.Context, steps ...*store.SagaStep) error {
	args := make([]any, 0, 11*len(steps))
	for _, st := range steps {
		args = append(args, st.SagaID, st.Step, st.StepName, st.Phase, st.Attempt,
			st.Outcome, st.IdempotencyKey, ms(st.StartedAt), ms(st.EndedAt), nullMS(st.RetryAt), nullString(st.Error))
	}
	switch len(steps) {
	case 0:
		return nil
	case 1:
		_, err := t.exec(ctx, "saga step of "+steps[0].SagaID, qSagaStepInsert, args...)
		return err
	}
	return t.insertMany(ctx, fmt.Sprintf("%d saga steps of %s", len(steps), steps[0].SagaID), qSagaStepInsertHead, qSagaStepInsertRow, args)
}

// SagaSteps implements store.Tx.
func (t *tx) SagaSteps(ctx context.Context, sagaID string) ([]*store.SagaStep, error) {
	rows, err := t.query(ctx, qSagaSteps, sagaID)
	if err != nil {
		return nil, fmt.Errorf("saga steps of %s: %w", sagaID, err)
	}
	defer rows.Close()
	var out []*store.SagaStep
	for rows.Next() {
		var (
			st             store.SagaStep
			started, ended int64
			retryAt        sql.NullInt64
			stepErr        sql.NullString
		)
		if err := rows.Scan(&st.ID, &st.SagaID, &st.Step, &st.StepName, &st.Phase, &st.Attempt, &st.Outcome,
			&st.IdempotencyKey, &started, &ended, &retryAt, &stepErr); err != nil {
			return nil, fmt.Errorf("saga steps of %s: %w", sagaID, err)
		}
		st.StartedAt, st.EndedAt, st.RetryAt, st.Error = fromMS(started), fromMS(ended), timePtr(retryAt), stepErr.String
		out = append(out, &st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("saga steps of %s: %w", sagaID, t.check(err))
	}
	return out, nil
}
