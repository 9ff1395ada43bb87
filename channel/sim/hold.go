package sim

import (
	"context"
	"embed"
	"errors"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// Calls of the simulated gateway's holds (card pre-authorisation), as recorded in the
// ledger.
const (
	GatewayAuthorize   GatewayOp = "authorize"    // place a hold
	GatewayCaptureHold GatewayOp = "capture_hold" // capture part or all of a hold
	GatewayVoidHold    GatewayOp = "void_hold"    // release a hold
)

// errNoDatabase is the error of a hold call on a gateway without UseDatabase.
var errNoDatabase = errors.New("sim: the simulated gateway keeps its holds in a database; call UseDatabase first")

// migrations are the gateway's tables, one folder of goose files per dialect.
//
//go:embed migrations
var migrations embed.FS

// UseDatabase applies the gateway's migrations to db (tables sim_holds, sim_hold_keys,
// sim_gateway_faults; version table orderly_sim_schema_version) and keeps there the holds, the keys
// of their captures, voids and refunds, and the armed TimeoutAfterApply faults, so that
// every instance on one database sees the holds any of them placed and a killed instance
// loses none. Without it the hold calls fail. The engine calls it when it serves "sim".
func (g *Gateway) UseDatabase(ctx context.Context, db *sqlstore.DB) error {
	if err := db.MigrateModule(ctx, "sim", migrations, "migrations"); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.db = db
	return nil
}

func (g *Gateway) holdStore() (*sqlstore.DB, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.db == nil {
		return nil, errNoDatabase
	}
	return g.db, nil
}

// SetClock replaces the gateway's clock that hold expiries are judged by and ledger entries
// stamped with (nil: the database's clock for holds, time.Now for the ledger); tests move it.
func (g *Gateway) SetClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

// holdNow returns the time holds are judged by: the test clock, or the database's.
func (g *Gateway) holdNow(ctx context.Context, tx store.Tx) (time.Time, error) {
	g.mu.Lock()
	now := g.now
	g.mu.Unlock()
	if now != nil {
		return now().UTC(), nil
	}
	return tx.Now(ctx)
}

// TimeoutAfterApply makes the next n calls of op (GatewayCaptureHold, GatewayVoidHold,
// GatewayAuthorize), on any instance sharing the store, apply their effect and then answer
// orderly.ErrGatewayTimeout, as a gateway whose reply is lost: a retry with the same idempotency
// key must not apply it twice. n ≤ 0 disarms it.
func (g *Gateway) TimeoutAfterApply(ctx context.Context, op GatewayOp, n int) error {
	st, err := g.holdStore()
	if err != nil {
		return err
	}
	return st.InTx(ctx, func(tx store.Tx) error { return armFault(ctx, tx, op, n) })
}

// Authorize places a hold of amount minor units until now + ttl (the gateway's clock,
// rounded up to the millisecond). The hold id is the idempotency key: authorising it again
// with the same amount returns the hold (a replay, recorded); with another amount it is
// EIDEMPOTENCY. Errors: EINVALID (amount ≤ 0, ttl ≤ 0), EIDEMPOTENCY, ErrGatewayTimeout
// when a fault is armed, the store's.
func (g *Gateway) Authorize(ctx context.Context, holdID string, amount int64, ttl time.Duration) (*orderly.Hold, error) {
	if amount <= 0 || ttl <= 0 {
		g.recordLocked(GatewayCall{Op: GatewayAuthorize, PaymentID: holdID, Amount: amount, IdempotencyKey: holdID})
		return nil, orderly.Errorf(orderly.EINVALID, "authorize %s: amount and ttl must be positive", holdID)
	}
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var (
		h       *hold
		timeout bool
	)
	err = st.InTx(ctx, func(tx store.Tx) error {
		now, err := g.holdNow(ctx, tx)
		if err != nil {
			return err
		}
		expires := now.Add(ttl)
		if r := expires.Truncate(time.Millisecond); r.Before(expires) {
			expires = r.Add(time.Millisecond)
		}
		h = &hold{Hold: orderly.Hold{ID: holdID, Amount: amount, State: orderly.HoldPending, ExpiresAt: expires}, CreatedAt: now}
		if err := insertHold(ctx, tx, h); err != nil {
			return err
		}
		timeout, err = takeFault(ctx, tx, GatewayAuthorize)
		return err
	})
	replay := orderly.ErrorCode(err) == orderly.ECONFLICT
	if replay {
		err = st.InTx(ctx, func(tx store.Tx) error {
			if h, err = getHold(ctx, tx, holdID); err != nil {
				return err
			}
			timeout, err = takeFault(ctx, tx, GatewayAuthorize)
			return err
		})
	}
	g.recordLocked(GatewayCall{Op: GatewayAuthorize, PaymentID: holdID, Amount: amount, IdempotencyKey: holdID, Replay: replay})
	switch {
	case err != nil:
		return nil, err
	case h.Amount != amount:
		return nil, orderly.Errorf(orderly.EIDEMPOTENCY, "hold %s was authorised for %d, not %d", holdID, h.Amount, amount)
	case timeout:
		return &h.Hold, orderly.ErrGatewayTimeout
	}
	return &h.Hold, nil
}

// CaptureHold captures amount (1 … the hold's amount) of a pending hold and releases the
// rest, once per idempotency key: the same key and amount again is a replay (recorded, no
// money moves) and returns the hold; the same key for another operation or amount is
// EIDEMPOTENCY. A capture at or after the hold's expiry is EHOLDEXPIRED (and the hold
// expires); more than the hold is EHOLDEXCEEDED; a hold captured or voided under another
// key is EHOLDNOTPENDING; an unknown hold ENOTFOUND. With a fault armed
// (TimeoutAfterApply) it captures, then answers orderly.ErrGatewayTimeout.
func (g *Gateway) CaptureHold(ctx context.Context, holdID, key string, amount int64) (*orderly.Hold, error) {
	return g.resolveHold(ctx, GatewayCaptureHold, holdID, key, amount)
}

// VoidHold releases a pending hold in full, once per idempotency key, with the rules of
// CaptureHold.
func (g *Gateway) VoidHold(ctx context.Context, holdID, key string) (*orderly.Hold, error) {
	return g.resolveHold(ctx, GatewayVoidHold, holdID, key, 0)
}

// resolveHold captures or voids a hold in one transaction: the hold's row locked first (so
// two calls on one hold, whatever their keys, take turns), then its key looked up, the
// change and the key written, and an armed fault consumed.
func (g *Gateway) resolveHold(ctx context.Context, op GatewayOp, holdID, key string, amount int64) (*orderly.Hold, error) {
	if key == "" {
		g.recordLocked(GatewayCall{Op: op, PaymentID: holdID, Amount: amount})
		return nil, orderly.Errorf(orderly.EINVALID, "%s %s: an idempotency key is required", op, holdID)
	}
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var (
		out             *hold
		replay, timeout bool
		refusal         error // committed: an expiry found on the way is written
	)
	err = st.InTx(ctx, func(tx store.Tx) error {
		replay, timeout, refusal = false, false, nil
		h, err := g.lockHold(ctx, tx, holdID)
		if err != nil {
			return err
		}
		out = h
		if prev, err := getKey(ctx, tx, key); err == nil {
			replay = true
			if prev.HoldID != holdID || prev.Op != string(op) || prev.Amount != amount {
				refusal = orderly.Errorf(orderly.EIDEMPOTENCY, "key %s was used for a %s of %d on hold %s", key, prev.Op, prev.Amount, prev.HoldID)
			}
			return nil
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		now, err := g.holdNow(ctx, tx)
		if err != nil {
			return err
		}
		if h.State == orderly.HoldPending && !now.Before(h.ExpiresAt) {
			h.State, h.Released, h.ResolvedAt = orderly.HoldExpired, h.Amount, &now
			if _, err := resolve(ctx, tx, h); err != nil {
				return err
			}
		}
		switch {
		case h.State == orderly.HoldExpired:
			refusal = orderly.Errorf(orderly.EHOLDEXPIRED, "hold %s expired at %s", holdID, h.ExpiresAt.Format(time.RFC3339Nano))
		case h.State != orderly.HoldPending:
			refusal = orderly.Errorf(orderly.EHOLDNOTPENDING, "hold %s is %s already", holdID, h.State)
		case op == GatewayCaptureHold && amount <= 0:
			refusal = orderly.Errorf(orderly.EINVALID, "capture of hold %s: amount must be positive", holdID)
		case op == GatewayCaptureHold && amount > h.Amount:
			refusal = orderly.Errorf(orderly.EHOLDEXCEEDED, "hold %s holds %d; a capture of %d is more", holdID, h.Amount, amount)
		}
		if refusal != nil {
			return nil //nolint:nilerr // refused: answered once this transaction commits (an expiry found above is kept)
		}
		if op == GatewayCaptureHold {
			h.State, h.Captured, h.Released = orderly.HoldPosted, amount, h.Amount-amount
		} else {
			h.State, h.Released = orderly.HoldVoided, h.Amount
		}
		h.ResolvedAt = &now
		if ok, err := resolve(ctx, tx, h); err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.ECONFLICT, "hold %s changed concurrently; retry", holdID)
		}
		if err := insertKey(ctx, tx, &HoldKey{Key: key, HoldID: holdID, Op: string(op), Amount: amount, CreatedAt: now}); err != nil {
			return err
		}
		timeout, err = takeFault(ctx, tx, op)
		return err
	})
	g.recordLocked(GatewayCall{Op: op, PaymentID: holdID, Amount: amount, IdempotencyKey: key, Replay: replay})
	switch {
	case err != nil:
		return nil, err
	case refusal != nil:
		return nil, refusal
	case timeout:
		return &out.Hold, orderly.ErrGatewayTimeout
	}
	return &out.Hold, nil
}

// RefundHold gives back amount minor units of what a hold captured, once per idempotency
// key: the same key and amount again is a replay (recorded as a refund replay, no money
// moves); the same key for another amount or hold is ECONFLICT. Errors: EINVALID (amount ≤
// 0, no key), ENOTFOUND (no such hold), EREFUNDEXCEEDS (more than captured and not yet
// refunded), the store's.
func (g *Gateway) RefundHold(ctx context.Context, holdID, key string, amount int64) error {
	if amount <= 0 || key == "" {
		return orderly.Errorf(orderly.EINVALID, "refund of hold %s: a positive amount and a key are required", holdID)
	}
	st, err := g.holdStore()
	if err != nil {
		return err
	}
	var replay bool
	err = st.InTx(ctx, func(tx store.Tx) error {
		replay = false
		if _, err := g.lockHold(ctx, tx, holdID); err != nil {
			return err
		}
		if prev, err := getKey(ctx, tx, key); err == nil {
			replay = true
			if prev.HoldID != holdID || prev.Op != string(GatewayRefund) || prev.Amount != amount {
				return orderly.Errorf(orderly.ECONFLICT, "refund key %s was used for a %s of %d on hold %s", key, prev.Op, prev.Amount, prev.HoldID)
			}
			return nil
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		if ok, err := refund(ctx, tx, holdID, amount); err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.EREFUNDEXCEEDS, "hold %s: a refund of %d is more than it captured and did not refund", holdID, amount)
		}
		now, err := g.holdNow(ctx, tx)
		if err != nil {
			return err
		}
		return insertKey(ctx, tx, &HoldKey{Key: key, HoldID: holdID, Op: string(GatewayRefund), Amount: amount, CreatedAt: now})
	})
	g.recordLocked(GatewayCall{Op: GatewayRefund, PaymentID: holdID, Amount: amount, IdempotencyKey: key, Replay: replay,
		Refused: err != nil && !replay})
	return err
}

// Hold returns a hold as the gateway sees it now (expired, released in full, once its
// expiry passed, even before a call processed it); ENOTFOUND if there is none.
func (g *Gateway) Hold(ctx context.Context, holdID string) (*orderly.Hold, error) {
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var out *orderly.Hold
	err = st.Read(ctx, func(tx store.Tx) error {
		h, err := getHold(ctx, tx, holdID)
		if err != nil {
			return err
		}
		now, err := g.holdNow(ctx, tx)
		if err != nil {
			return err
		}
		if h.State == orderly.HoldPending && !now.Before(h.ExpiresAt) {
			h.State, h.Released = orderly.HoldExpired, h.Amount
		}
		out = &h.Hold
		return nil
	})
	return out, err
}

// HoldKeys returns what each capture, void and refund key applied to a hold, oldest
// first: one capture key per hold means it was never captured twice.
func (g *Gateway) HoldKeys(ctx context.Context, holdID string) ([]*HoldKey, error) {
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var out []*HoldKey
	err = st.Read(ctx, func(tx store.Tx) error {
		var err error
		out, err = keysOf(ctx, tx, holdID)
		return err
	})
	return out, err
}

// Calls returns the calls of one operation on one hold (or payment) id that this process
// received and were not replays of an idempotency key (refused calls included), in order.
func (g *Gateway) Calls(op GatewayOp, id string) []GatewayCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []GatewayCall
	for _, c := range g.ledger {
		if c.Op == op && c.PaymentID == id && !c.Replay {
			out = append(out, c)
		}
	}
	return out
}

// recordLocked appends a call to the ledger, taking g.mu.
func (g *Gateway) recordLocked(c GatewayCall) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.record(c)
}

// clock returns the gateway's time for the ledger; g.mu is held.
func (g *Gateway) clock() time.Time {
	if g.now != nil {
		return g.now().UTC()
	}
	return time.Now().UTC()
}
