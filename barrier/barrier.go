// Package barrier is the branch barrier of a saga participant that keeps its data in its
// own SQL database (docs/concepts/sagas.md): in the participant's own transaction it records the
// operation's key, so that whatever order and number of times the orchestrator's calls
// arrive in, the participant's effect happens at most once and a compensation never misses
// or precedes its action:
//
//   - idempotency: a repeated action, or a repeated compensation, is a no-op success;
//   - null compensation: a compensation of an action that never ran writes a marker in the
//     action's place and succeeds without doing anything;
//   - hanging: an action that arrives after its compensation (it finds that marker) is
//     refused with ErrHanging, and does nothing.
//
// The idea is the "branch barrier" of DTM; this is our own code. It needs one table,
// saga_barrier (DDL returns its statement per dialect, CreateTable runs it; orderly's own
// database has it from migration 00009):
//
//	saga_barrier (saga_id, step, op, reason, created_at), PRIMARY KEY (saga_id, step, op)
//
// A row (s, t, "action") records the action of step t of saga s: reason "action" when the
// action ran, "compensation" when a compensation got there first (the null compensation's
// marker). A row (s, t, "compensation") records the compensation. Both are written with an
// insert that ignores a duplicate key, so concurrent duplicates queue behind the first
// insert's row lock and never deadlock: exactly one of them inserts, the others see the
// row once it commits.
//
// SQLite: open the database with a busy timeout (for example
// "file.db?_pragma=busy_timeout(5000)"); every barrier transaction writes first, so it
// waits for the one writer instead of failing.
package barrier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Dialects: "sqlite", "postgres" and "mysql" (MySQL 8 or MariaDB 10.6+).
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Phases of an operation (the values of column op).
const (
	PhaseAction       = "action"
	PhaseCompensation = "compensation"
)

// ErrHanging refuses an action that arrived after the compensation of its step: the
// orchestrator has given up on it, and running it now would leave an effect that nothing
// undoes.
var ErrHanging = errors.New("barrier: the action arrived after its compensation (hanging); refused")

// Result says what Call did.
type Result string

// The results of Call.
const (
	Applied          Result = "applied"           // fn ran and its transaction committed
	Duplicate        Result = "duplicate"         // the operation had been applied; fn did not run
	NullCompensation Result = "null_compensation" // a compensation found no action: marker written, fn did not run
	Refused          Result = "refused"           // a hanging action (ErrHanging); fn did not run
)

// Key names one operation: the step of a saga and its phase (the saga orchestrator's
// idempotency key, saga.Call's SagaID, StepName and Phase).
type Key struct {
	SagaID string
	Step   string
	Phase  string // PhaseAction or PhaseCompensation
}

// Barrier records operations in table saga_barrier of db.
type Barrier struct {
	db      *sql.DB
	dialect string
	insert  string
	reason  string
	now     func() time.Time
}

// New returns a barrier over db, a handle of the given dialect. It returns an error for an
// unknown dialect.
func New(db *sql.DB, dialect string) (*Barrier, error) {
	b := &Barrier{db: db, dialect: dialect, now: time.Now}
	switch dialect {
	case SQLite:
		b.insert = `INSERT INTO saga_barrier (saga_id, step, op, reason, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
		b.reason = `SELECT reason FROM saga_barrier WHERE saga_id = ? AND step = ? AND op = ?`
	case Postgres:
		b.insert = `INSERT INTO saga_barrier (saga_id, step, op, reason, created_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`
		b.reason = `SELECT reason FROM saga_barrier WHERE saga_id = $1 AND step = $2 AND op = $3`
	case MySQL:
		b.insert = `INSERT IGNORE INTO saga_barrier (saga_id, step, op, reason, created_at) VALUES (?, ?, ?, ?, ?)`
		b.reason = `SELECT reason FROM saga_barrier WHERE saga_id = ? AND step = ? AND op = ?`
	default:
		return nil, fmt.Errorf("barrier: unknown dialect %q", dialect)
	}
	return b, nil
}

// DDL returns the CREATE TABLE statement of saga_barrier in dialect ("" for an unknown
// one). It is the same table as migration 00009 of orderly's store.
func DDL(dialect string) string {
	switch dialect {
	case SQLite, Postgres:
		return `CREATE TABLE IF NOT EXISTS saga_barrier (
    saga_id    TEXT   NOT NULL,
    step       TEXT   NOT NULL,
    op         TEXT   NOT NULL CHECK (op IN ('action', 'compensation')),
    reason     TEXT   NOT NULL CHECK (reason IN ('action', 'compensation')),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (saga_id, step, op)
)`
	case MySQL:
		return `CREATE TABLE IF NOT EXISTS saga_barrier (
    saga_id    VARCHAR(128) NOT NULL,
    step       VARCHAR(128) NOT NULL,
    op         VARCHAR(16)  NOT NULL CHECK (op IN ('action', 'compensation')),
    reason     VARCHAR(16)  NOT NULL CHECK (reason IN ('action', 'compensation')),
    created_at BIGINT       NOT NULL,
    PRIMARY KEY (saga_id, step, op)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`
	}
	return ""
}

// CreateTable creates saga_barrier in db when it does not exist.
func CreateTable(ctx context.Context, db *sql.DB, dialect string) error {
	ddl := DDL(dialect)
	if ddl == "" {
		return fmt.Errorf("barrier: unknown dialect %q", dialect)
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("barrier: create table: %w", err)
	}
	return nil
}

// Call runs fn, the participant's work for operation key, in a transaction of the
// barrier's database that first records the key, and commits when fn returns nil. It
// returns what it did: Applied (fn ran and committed); Duplicate (the same operation was
// applied before: fn does not run, nil error); NullCompensation (a compensation whose
// action never ran: the marker is written, fn does not run, nil error); Refused with
// ErrHanging (an action after its compensation: fn does not run). When fn returns an error
// nothing is recorded and Call returns fn's error (the orchestrator retries with the same
// key). Other errors are the database's, wrapped.
func (b *Barrier) Call(ctx context.Context, key Key, fn func(tx *sql.Tx) error) (Result, error) {
	if key.Phase != PhaseAction && key.Phase != PhaseCompensation {
		return "", fmt.Errorf("barrier: unknown phase %q", key.Phase)
	}
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("barrier: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := b.record(ctx, tx, key)
	if err != nil {
		return res, err
	}
	if res == Applied {
		if err := fn(tx); err != nil {
			return "", err
		}
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("barrier: commit: %w", err)
	}
	return res, nil
}

// record writes key's rows in tx and says whether fn must run.
func (b *Barrier) record(ctx context.Context, tx *sql.Tx, key Key) (Result, error) {
	now := b.now().UnixMilli()
	if key.Phase == PhaseCompensation {
		// The action's row first: inserting it means the action never ran (null
		// compensation), and it stops the action from running later (hanging).
		n, err := b.exec(ctx, tx, key.SagaID, key.Step, PhaseAction, PhaseCompensation, now)
		if err != nil {
			return "", err
		}
		m, err := b.exec(ctx, tx, key.SagaID, key.Step, PhaseCompensation, PhaseCompensation, now)
		switch {
		case err != nil:
			return "", err
		case m == 0:
			return Duplicate, nil
		case n == 1:
			return NullCompensation, nil
		}
		return Applied, nil
	}
	n, err := b.exec(ctx, tx, key.SagaID, key.Step, PhaseAction, PhaseAction, now)
	if err != nil || n == 1 {
		return Applied, err
	}
	var reason string
	if err := tx.QueryRowContext(ctx, b.reason, key.SagaID, key.Step, PhaseAction).Scan(&reason); err != nil {
		return "", fmt.Errorf("barrier: read %s/%s: %w", key.SagaID, key.Step, err)
	}
	if reason == PhaseCompensation {
		return Refused, ErrHanging
	}
	return Duplicate, nil
}

func (b *Barrier) exec(ctx context.Context, tx *sql.Tx, sagaID, step, op, reason string, now int64) (int64, error) {
	res, err := tx.ExecContext(ctx, b.insert, sagaID, step, op, reason, now)
	if err != nil {
		return 0, fmt.Errorf("barrier: record %s/%s/%s: %w", sagaID, step, op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("barrier: record %s/%s/%s: %w", sagaID, step, op, err)
	}
	return n, nil
}
