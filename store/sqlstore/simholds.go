package sqlstore

import (
	"context"
	"database/sql"

	"github.com/orderlyhq/orderly/store"
)

const (
	simHoldColumns    = `id, amount, captured, released, refunded, state, expires_at, created_at, resolved_at`
	simHoldKeyColumns = `idempotency_key, hold_id, op, amount, created_at`
)

var (
	qSimHoldInsert = sqlText(`INSERT INTO sim_holds (` + simHoldColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qSimHoldGet    = sqlText(`SELECT ` + simHoldColumns + ` FROM sim_holds WHERE id = ?`)
	qSimHoldLock   = newQuery(func(d *dialect) string {
		return `SELECT ` + simHoldColumns + ` FROM sim_holds WHERE id = ?` + d.lockRows
	})
	qSimHoldResolve = sqlText(`UPDATE sim_holds SET state = ?, captured = ?, released = ?, resolved_at = ?
		WHERE id = ? AND state = 'pending'`)
	qSimHoldRefund    = sqlText(`UPDATE sim_holds SET refunded = refunded + ? WHERE id = ? AND refunded + ? <= captured`)
	qSimHoldKeyInsert = sqlText(`INSERT INTO sim_hold_keys (` + simHoldKeyColumns + `) VALUES (?, ?, ?, ?, ?)`)
	qSimHoldKeyGet    = sqlText(`SELECT ` + simHoldKeyColumns + ` FROM sim_hold_keys WHERE idempotency_key = ?`)
	qSimHoldKeys      = sqlText(`SELECT ` + simHoldKeyColumns + ` FROM sim_hold_keys WHERE hold_id = ?
		ORDER BY created_at, idempotency_key`)
	qSimHoldList    = sqlText(`SELECT ` + simHoldColumns + ` FROM sim_holds WHERE id > ? ORDER BY id LIMIT ?`)
	qSimHoldKeyList = sqlText(`SELECT ` + simHoldKeyColumns + ` FROM sim_hold_keys WHERE idempotency_key > ?
		ORDER BY idempotency_key LIMIT ?`)
	qSimFaultDelete = sqlText(`DELETE FROM sim_gateway_faults WHERE op = ?`)
	qSimFaultInsert = sqlText(`INSERT INTO sim_gateway_faults (op, remaining) VALUES (?, ?)`)
	qSimFaultTake   = sqlText(`UPDATE sim_gateway_faults SET remaining = remaining - 1 WHERE op = ? AND remaining > 0`)
)

func scanSimHold(r rowScanner) (*store.SimHold, error) {
	var (
		h                store.SimHold
		expires, created int64
		resolved         sql.NullInt64
	)
	if err := r.Scan(&h.ID, &h.Amount, &h.Captured, &h.Released, &h.Refunded, &h.State, &expires, &created, &resolved); err != nil {
		return nil, err
	}
	h.ExpiresAt, h.CreatedAt, h.ResolvedAt = fromMS(expires), fromMS(created), timePtr(resolved)
	return &h, nil
}

func scanSimHoldKey(r rowScanner) (*store.SimHoldKey, error) {
	var (
		k  store.SimHoldKey
		at int64
	)
	if err := r.Scan(&k.Key, &k.HoldID, &k.Op, &k.Amount, &at); err != nil {
		return nil, err
	}
	k.CreatedAt = fromMS(at)
	return &k, nil
}

// SimHoldInsert implements store.Tx.
func (t *tx) SimHoldInsert(ctx context.Context, h *store.SimHold) error {
	_, err := t.exec(ctx, "sim hold "+h.ID, qSimHoldInsert, h.ID, h.Amount, h.Captured, h.Released, h.Refunded, h.State,
		ms(h.ExpiresAt), ms(h.CreatedAt), nullMS(h.ResolvedAt))
	return err
}

// SimHoldGet implements store.Tx.
func (t *tx) SimHoldGet(ctx context.Context, id string) (*store.SimHold, error) {
	h, err := scanSimHold(t.queryRow(ctx, qSimHoldGet, id))
	return h, translate(t.check(err), "sim hold "+id)
}

// SimHoldLock implements store.Tx.
func (t *tx) SimHoldLock(ctx context.Context, id string) (*store.SimHold, error) {
	h, err := scanSimHold(t.queryRow(ctx, qSimHoldLock, id))
	return h, translate(t.check(err), "sim hold "+id)
}

// SimHoldResolve implements store.Tx.
func (t *tx) SimHoldResolve(ctx context.Context, h *store.SimHold) (bool, error) {
	n, err := t.exec(ctx, "resolve sim hold "+h.ID, qSimHoldResolve, h.State, h.Captured, h.Released, nullMS(h.ResolvedAt), h.ID)
	return n == 1, err
}

// SimHoldRefund implements store.Tx.
func (t *tx) SimHoldRefund(ctx context.Context, id string, amount int64) (bool, error) {
	n, err := t.exec(ctx, "refund sim hold "+id, qSimHoldRefund, amount, id, amount)
	return n == 1, err
}

// SimHoldKeyInsert implements store.Tx.
func (t *tx) SimHoldKeyInsert(ctx context.Context, k *store.SimHoldKey) error {
	_, err := t.exec(ctx, "sim hold key "+k.Key, qSimHoldKeyInsert, k.Key, k.HoldID, k.Op, k.Amount, ms(k.CreatedAt))
	return err
}

// SimHoldKeyGet implements store.Tx.
func (t *tx) SimHoldKeyGet(ctx context.Context, key string) (*store.SimHoldKey, error) {
	k, err := scanSimHoldKey(t.queryRow(ctx, qSimHoldKeyGet, key))
	return k, translate(t.check(err), "sim hold key "+key)
}

// SimHoldKeys implements store.Tx.
func (t *tx) SimHoldKeys(ctx context.Context, holdID string) ([]*store.SimHoldKey, error) {
	return scanAll(t, ctx, "keys of sim hold "+holdID, scanSimHoldKey, qSimHoldKeys, holdID)
}

// SimGatewayFaultArm implements store.Tx.
func (t *tx) SimGatewayFaultArm(ctx context.Context, op string, n int) error {
	if _, err := t.exec(ctx, "sim gateway fault "+op, qSimFaultDelete, op); err != nil || n <= 0 {
		return err
	}
	_, err := t.exec(ctx, "sim gateway fault "+op, qSimFaultInsert, op, n)
	return err
}

// SimGatewayFaultTake implements store.Tx.
func (t *tx) SimGatewayFaultTake(ctx context.Context, op string) (bool, error) {
	n, err := t.exec(ctx, "sim gateway fault "+op, qSimFaultTake, op)
	return n == 1, err
}

// SimHoldList implements store.Tx.
func (t *tx) SimHoldList(ctx context.Context, p *store.ListParams) ([]*store.SimHold, error) {
	return scanAll(t, ctx, "list sim holds", scanSimHold, qSimHoldList, p.AfterID, p.Limit)
}

// SimHoldKeyList implements store.Tx.
func (t *tx) SimHoldKeyList(ctx context.Context, p *store.ListParams) ([]*store.SimHoldKey, error) {
	return scanAll(t, ctx, "list sim hold keys", scanSimHoldKey, qSimHoldKeyList, p.AfterID, p.Limit)
}
