package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly/store"
)

var (
	qLeaseEnsure = newQuery(func(d *dialect) string {
		if d == mysqlDialect {
			return `INSERT IGNORE INTO leases (name, owner, token, expires_at) VALUES (?, '', 0, 0)`
		}
		return `INSERT INTO leases (name, owner, token, expires_at) VALUES (?, '', 0, 0) ON CONFLICT (name) DO NOTHING`
	})
	// qLeaseTake assigns token first: MySQL evaluates SET left to right with new values.
	qLeaseTake = sqlText(`UPDATE leases SET token = CASE WHEN owner = ? THEN token ELSE token + 1 END, owner = ?, expires_at = ?
		WHERE name = ? AND (owner = ? OR expires_at <= ?)`)
	qLeaseGet   = sqlText(`SELECT owner, token, expires_at FROM leases WHERE name = ?`)
	qLeaseCheck = newQuery(func(d *dialect) string {
		return `SELECT token FROM leases WHERE name = ? AND owner = ? AND token = ? AND expires_at > ?` + d.lockRows
	})
	qLeaseRelease = sqlText(`UPDATE leases SET expires_at = 0 WHERE name = ? AND owner = ? AND token = ?`)
	qJobRunInsert = sqlText(`INSERT INTO job_runs (job, instance, token, started_at, finished_at, scanned, changed, error)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	qJobRunList = sqlText(`SELECT id, job, instance, token, started_at, finished_at, scanned, changed, error
		FROM job_runs WHERE ? = '' OR job = ? ORDER BY id DESC LIMIT ?`)
)

// LeaseAcquire implements store.Tx. The row is taken with the guarded UPDATE first and
// created (INSERT … DO NOTHING / INSERT IGNORE) only when it does not exist yet: on InnoDB an
// insert of an existing key takes a shared lock on the row, and a later UPDATE upgrading it
// deadlocked against a LeaseCheck waiting for the same row. Whether the lease is held is read
// back from the row rather than from the count of affected rows, which MySQL reports as 0
// for a renewal that changes nothing (the same expiry in the same millisecond).
func (t *tx) LeaseAcquire(ctx context.Context, p *store.LeaseParams) (*store.Lease, bool, error) {
	l := store.Lease{Name: p.Name}
	var expires int64
	for created := false; ; created = true {
		if _, err := t.exec(ctx, "lease "+p.Name, qLeaseTake, p.Owner, p.Owner, ms(p.Now.Add(p.TTL)), p.Name, p.Owner, ms(p.Now)); err != nil {
			return nil, false, err
		}
		err := t.queryRow(ctx, qLeaseGet, p.Name).Scan(&l.Owner, &l.Token, &expires)
		if err == nil {
			break
		} else if !errors.Is(err, sql.ErrNoRows) || created {
			return nil, false, translate(err, "lease "+p.Name)
		}
		if _, err := t.exec(ctx, "lease "+p.Name, qLeaseEnsure, p.Name); err != nil {
			return nil, false, err
		}
	}
	l.ExpiresAt = fromMS(expires)
	return &l, l.Owner == p.Owner && expires > ms(p.Now), nil
}

// LeaseCheck implements store.Tx.
func (t *tx) LeaseCheck(ctx context.Context, name, owner string, token int64, now time.Time) (bool, error) {
	rows, err := t.query(ctx, qLeaseCheck, name, owner, token, ms(now))
	if err != nil {
		return false, fmt.Errorf("check lease %s: %w", name, err)
	}
	defer rows.Close()
	held := rows.Next()
	return held, rows.Err()
}

// LeaseRelease implements store.Tx.
func (t *tx) LeaseRelease(ctx context.Context, name, owner string, token int64) error {
	_, err := t.exec(ctx, "release lease "+name, qLeaseRelease, name, owner, token)
	return err
}

// JobRunInsert implements store.Tx.
func (t *tx) JobRunInsert(ctx context.Context, r *store.JobRun) error {
	_, err := t.exec(ctx, "job run of "+r.Job, qJobRunInsert, r.Job, r.Instance, r.Token, ms(r.StartedAt),
		ms(r.FinishedAt), r.Scanned, r.Changed, r.Error)
	return err
}

// JobRunList implements store.Tx.
func (t *tx) JobRunList(ctx context.Context, job string, limit int) ([]*store.JobRun, error) {
	rows, err := t.query(ctx, qJobRunList, job, job, limit)
	if err != nil {
		return nil, fmt.Errorf("list job runs: %w", err)
	}
	defer rows.Close()
	var out []*store.JobRun
	for rows.Next() {
		var (
			r                 store.JobRun
			started, finished int64
		)
		if err := rows.Scan(&r.ID, &r.Job, &r.Instance, &r.Token, &started, &finished, &r.Scanned, &r.Changed, &r.Error); err != nil {
			return nil, fmt.Errorf("list job runs: %w", err)
		}
		r.StartedAt, r.FinishedAt = fromMS(started), fromMS(finished)
		out = append(out, &r)
	}
	return out, rows.Err()
}
