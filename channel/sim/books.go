package sim

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// The gateway's books: its tables (migrations/) and their statements, run in the store's
// transactions (sqlstore.Exec, sqlstore.Query).

// hold is a row of sim_holds: the hold, when it was placed and when it was resolved (nil
// while pending).
type hold struct {
	orderly.Hold
	CreatedAt  time.Time
	ResolvedAt *time.Time
}

// HoldKey is what one idempotency key applied: an operation ("capture_hold", "void_hold",
// "refund") of Amount minor units (0 for a void) on a hold.
type HoldKey struct {
	Key       string
	HoldID    string
	Op        string
	Amount    int64
	CreatedAt time.Time
}

const (
	holdColumns = `id, amount, captured, released, refunded, state, expires_at, created_at, resolved_at`
	keyColumns  = `idempotency_key, hold_id, op, amount, created_at`
)

// rows runs a query and scans every row it returns.
func rows[T any](ctx context.Context, tx store.Tx, scan func(*sql.Rows) (T, error), text string, args ...any) ([]T, error) {
	rs, err := sqlstore.Query(ctx, tx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []T
	for rs.Next() {
		v, err := scan(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rs.Err()
}

// one returns the one row of a query; ENOTFOUND (naming what) for none.
func one[T any](ctx context.Context, tx store.Tx, what string, scan func(*sql.Rows) (T, error), text string, args ...any) (T, error) {
	out, err := rows(ctx, tx, scan, text, args...)
	if err == nil && len(out) == 0 {
		err = orderly.Errorf(orderly.ENOTFOUND, "%s not found", what)
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return out[0], nil
}

func scanHold(r *sql.Rows) (*hold, error) {
	var (
		h                hold
		expires, created int64
		resolved         sql.NullInt64
	)
	if err := r.Scan(&h.ID, &h.Amount, &h.Captured, &h.Released, &h.Refunded, &h.State, &expires, &created, &resolved); err != nil {
		return nil, err
	}
	h.ExpiresAt, h.CreatedAt = time.UnixMilli(expires).UTC(), time.UnixMilli(created).UTC()
	if resolved.Valid {
		at := time.UnixMilli(resolved.Int64).UTC()
		h.ResolvedAt = &at
	}
	return &h, nil
}

func scanKey(r *sql.Rows) (*HoldKey, error) {
	var (
		k  HoldKey
		at int64
	)
	err := r.Scan(&k.Key, &k.HoldID, &k.Op, &k.Amount, &at)
	k.CreatedAt = time.UnixMilli(at).UTC()
	return &k, err
}

func msPtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

// insertHold writes a new hold; ECONFLICT when its id exists.
func insertHold(ctx context.Context, tx store.Tx, h *hold) error {
	_, err := sqlstore.Exec(ctx, tx, "sim hold "+h.ID, `INSERT INTO sim_holds (`+holdColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		h.ID, h.Amount, h.Captured, h.Released, h.Refunded, h.State, h.ExpiresAt.UnixMilli(), h.CreatedAt.UnixMilli(), msPtr(h.ResolvedAt))
	return err
}

// getHold returns a hold; ENOTFOUND if there is none.
func getHold(ctx context.Context, tx store.Tx, id string) (*hold, error) {
	return one(ctx, tx, "sim hold "+id, scanHold, `SELECT `+holdColumns+` FROM sim_holds WHERE id = ?`, id)
}

// lockHold is getHold that also locks the hold's row until the transaction ends (where the
// dialect has row locks; SQLite has one writer).
func (g *Gateway) lockHold(ctx context.Context, tx store.Tx, id string) (*hold, error) {
	lock := map[bool]string{true: ` FOR UPDATE`}[g.db.Dialect() != "sqlite"]
	return one(ctx, tx, "sim hold "+id, scanHold, `SELECT `+holdColumns+` FROM sim_holds WHERE id = ?`+lock, id)
}

// resolve is the one state change of a hold: pending → h.State (posted, voided, expired)
// with h.Captured, h.Released and h.ResolvedAt; false, changing nothing, when it is not
// pending.
func resolve(ctx context.Context, tx store.Tx, h *hold) (bool, error) {
	n, err := sqlstore.Exec(ctx, tx, "resolve sim hold "+h.ID, `UPDATE sim_holds SET state = ?, captured = ?, released = ?,
		resolved_at = ? WHERE id = ? AND state = 'pending'`, h.State, h.Captured, h.Released, msPtr(h.ResolvedAt), h.ID)
	return n == 1, err
}

// refund adds amount (> 0) to a hold's refunded while refunded + amount ≤ captured; false,
// changing nothing, otherwise.
func refund(ctx context.Context, tx store.Tx, id string, amount int64) (bool, error) {
	n, err := sqlstore.Exec(ctx, tx, "refund sim hold "+id,
		`UPDATE sim_holds SET refunded = refunded + ? WHERE id = ? AND refunded + ? <= captured`, amount, id, amount)
	return n == 1, err
}

// insertKey records what a key applied; ECONFLICT when the key exists.
func insertKey(ctx context.Context, tx store.Tx, k *HoldKey) error {
	_, err := sqlstore.Exec(ctx, tx, "sim hold key "+k.Key, `INSERT INTO sim_hold_keys (`+keyColumns+`) VALUES (?, ?, ?, ?, ?)`,
		k.Key, k.HoldID, k.Op, k.Amount, k.CreatedAt.UnixMilli())
	return err
}

// getKey returns what a key applied; ENOTFOUND if it applied nothing.
func getKey(ctx context.Context, tx store.Tx, key string) (*HoldKey, error) {
	return one(ctx, tx, "sim hold key "+key, scanKey, `SELECT `+keyColumns+` FROM sim_hold_keys WHERE idempotency_key = ?`, key)
}

// keysOf returns the keys that applied something to a hold, oldest first.
func keysOf(ctx context.Context, tx store.Tx, holdID string) ([]*HoldKey, error) {
	return rows(ctx, tx, scanKey, `SELECT `+keyColumns+` FROM sim_hold_keys WHERE hold_id = ? ORDER BY created_at, idempotency_key`, holdID)
}

// armFault sets how many of the next calls of op apply and then answer a timeout (n ≤ 0
// disarms it).
func armFault(ctx context.Context, tx store.Tx, op GatewayOp, n int) error {
	if _, err := sqlstore.Exec(ctx, tx, "sim gateway fault "+string(op), `DELETE FROM sim_gateway_faults WHERE op = ?`, op); err != nil || n <= 0 {
		return err
	}
	_, err := sqlstore.Exec(ctx, tx, "sim gateway fault "+string(op), `INSERT INTO sim_gateway_faults (op, remaining) VALUES (?, ?)`, op, n)
	return err
}

// takeFault consumes one armed fault of op and reports whether there was one.
func takeFault(ctx context.Context, tx store.Tx, op GatewayOp) (bool, error) {
	n, err := sqlstore.Exec(ctx, tx, "sim gateway fault "+string(op),
		`UPDATE sim_gateway_faults SET remaining = remaining - 1 WHERE op = ? AND remaining > 0`, op)
	return n == 1, err
}

// ReadHold reads in tx (a transaction of a sqlstore.DB) a hold as the gateway sees it at
// the database's clock (a pending hold past its expiry is expired, released in full) and
// the keys that applied something to it, oldest first; ENOTFOUND if there is none.
func ReadHold(ctx context.Context, tx store.Tx, id string) (*orderly.Hold, []*HoldKey, error) {
	h, err := getHold(ctx, tx, id)
	if err != nil {
		return nil, nil, err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	if h.State == orderly.HoldPending && !now.Before(h.ExpiresAt) {
		h.State, h.Released = orderly.HoldExpired, h.Amount
	}
	keys, err := keysOf(ctx, tx, id)
	return &h.Hold, keys, err
}

// ReadHolds reads, in tx (a transaction of a sqlstore.DB), every hold of the simulated
// gateway by id, and the faults of its books: a hold captured under more than one key (a
// double capture), or refunded other than its refund keys add up to. A database that never
// served "sim" has no holds (nil, nil, nil). It is verify.Options.Holds.
func ReadHolds(ctx context.Context, tx store.Tx) (map[string]*orderly.Hold, []string, error) {
	if ok, err := sqlstore.HasTable(ctx, tx, "sim_holds"); !ok || err != nil {
		return nil, nil, err
	}
	all, err := rows(ctx, tx, scanHold, `SELECT `+holdColumns+` FROM sim_holds ORDER BY id`)
	if err != nil {
		return nil, nil, err
	}
	keys, err := rows(ctx, tx, scanKey, `SELECT `+keyColumns+` FROM sim_hold_keys ORDER BY hold_id, created_at, idempotency_key`)
	if err != nil {
		return nil, nil, err
	}
	captures, refunded := map[string][]string{}, map[string]int64{}
	for _, k := range keys {
		switch GatewayOp(k.Op) {
		case GatewayCaptureHold:
			captures[k.HoldID] = append(captures[k.HoldID], k.Key)
		case GatewayRefund:
			refunded[k.HoldID] += k.Amount
		}
	}
	holds, faults := make(map[string]*orderly.Hold, len(all)), []string(nil)
	for _, h := range all {
		holds[h.ID] = &h.Hold
		if c := captures[h.ID]; len(c) > 1 {
			faults = append(faults, fmt.Sprintf("gateway hold %s captured under %d keys (%s): a double capture", h.ID, len(c), strings.Join(c, ", ")))
		}
		if refunded[h.ID] != h.Refunded {
			faults = append(faults, fmt.Sprintf("gateway hold %s refunded %d, its refund keys add up to %d", h.ID, h.Refunded, refunded[h.ID]))
		}
	}
	return holds, faults, nil
}
