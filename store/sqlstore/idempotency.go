package sqlstore

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly/store"
)

const idempotencyColumns = `id, request_hash, owner, status, content_type, location, body, created_at, locked_until, expires_at`

var (
	// qIdempotencyInsert inserts a claim unless the id has a row. MySQL: the no-op update
	// reports 0 rows for a duplicate, as in qChannelEventInsert.
	qIdempotencyInsert = newQuery(func(d *dialect) string {
		q := `INSERT INTO idempotency_keys (` + idempotencyColumns + `) VALUES (?, ?, ?, 0, '', '', NULL, ?, ?, ?)`
		if d == mysqlDialect {
			return q + ` ON DUPLICATE KEY UPDATE id = id`
		}
		return q + ` ON CONFLICT (id) DO NOTHING`
	})
	qIdempotencyTakeOver = sqlText(`UPDATE idempotency_keys
		SET request_hash = ?, owner = ?, status = 0, content_type = '', location = '', body = NULL,
			created_at = ?, locked_until = ?, expires_at = ?
		WHERE id = ? AND (expires_at <= ? OR (status = 0 AND locked_until <= ? AND request_hash = ?))`)
	qIdempotencyGet      = sqlText(`SELECT ` + idempotencyColumns + ` FROM idempotency_keys WHERE id = ?`)
	qIdempotencyComplete = sqlText(`UPDATE idempotency_keys SET status = ?, content_type = ?, location = ?, body = ?
		WHERE id = ? AND owner = ? AND status = 0`)
	qIdempotencyRelease       = sqlText(`DELETE FROM idempotency_keys WHERE id = ? AND owner = ? AND status = 0`)
	qIdempotencyDeleteExpired = newQuery(func(d *dialect) string {
		if d == mysqlDialect { // MySQL has no LIMIT in an IN subquery, but DELETE … LIMIT
			return `DELETE FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`
		}
		return `DELETE FROM idempotency_keys WHERE id IN (SELECT id FROM idempotency_keys
			WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`
	})
)

// IdempotencyClaim implements store.Tx.
func (t *tx) IdempotencyClaim(ctx context.Context, r *store.IdempotentRequest) (*store.IdempotentRequest, error) {
	what := "idempotency key " + r.ID
	n, err := t.exec(ctx, what, qIdempotencyInsert, r.ID, r.RequestHash, r.Owner, ms(r.CreatedAt), ms(r.LockedUntil), ms(r.ExpiresAt))
	if err != nil || n == 1 {
		return nil, err
	}
	now := ms(r.CreatedAt)
	n, err = t.exec(ctx, what, qIdempotencyTakeOver, r.RequestHash, r.Owner, now, ms(r.LockedUntil), ms(r.ExpiresAt),
		r.ID, now, now, r.RequestHash)
	if err != nil || n == 1 {
		return nil, err
	}
	var (
		got                         store.IdempotentRequest
		created, lockedUntil, expir int64
	)
	if err := t.queryRow(ctx, qIdempotencyGet, r.ID).Scan(&got.ID, &got.RequestHash, &got.Owner, &got.Status,
		&got.ContentType, &got.Location, &got.Body, &created, &lockedUntil, &expir); err != nil {
		return nil, translate(err, what)
	}
	got.CreatedAt, got.LockedUntil, got.ExpiresAt = fromMS(created), fromMS(lockedUntil), fromMS(expir)
	return &got, nil
}

// IdempotencyComplete implements store.Tx.
func (t *tx) IdempotencyComplete(ctx context.Context, r *store.IdempotentRequest) (bool, error) {
	n, err := t.exec(ctx, "answer of idempotency key "+r.ID, qIdempotencyComplete, r.Status, r.ContentType, r.Location, r.Body, r.ID, r.Owner)
	return n == 1, err
}

// IdempotencyRelease implements store.Tx.
func (t *tx) IdempotencyRelease(ctx context.Context, id, owner string) error {
	_, err := t.exec(ctx, "release idempotency key "+id, qIdempotencyRelease, id, owner)
	return err
}

// IdempotencyDeleteExpired implements store.Tx.
func (t *tx) IdempotencyDeleteExpired(ctx context.Context, now time.Time, limit int) (int64, error) {
	return t.exec(ctx, "delete expired idempotency keys", qIdempotencyDeleteExpired, ms(now), limit)
}
