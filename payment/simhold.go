package payment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Calls of the simulated gateway's holds (card pre-authorisation), as recorded in the
// ledger.
const (
	GatewayAuthorize   GatewayOp = "authorize"    // place a hold
	GatewayCaptureHold GatewayOp = "capture_hold" // capture part or all of a hold
	GatewayVoidHold    GatewayOp = "void_hold"    // release a hold
)

// ErrGatewayTimeout is the error of a call whose reply did not arrive in time: the caller
// cannot tell whether the gateway applied it, and must retry with the same idempotency
// key (or inspect). It wraps context.DeadlineExceeded.
var ErrGatewayTimeout = fmt.Errorf("payment: the gateway did not answer in time; the call may have been applied: %w", context.DeadlineExceeded)

// errNoHoldStore is the error of a hold call on a gateway without UseStore.
var errNoHoldStore = errors.New("payment: the simulated gateway keeps its holds in a store; call UseStore first")

// SimHold is a hold of the simulated gateway: Amount (minor units) authorised on a card
// until ExpiresAt (the gateway's clock), then Captured (≤ Amount, once) and the rest
// released, or voided, or expired; Refunded (≤ Captured) of the capture given back.
type SimHold struct {
	ID        string            `json:"id"`
	Amount    int64             `json:"amount"`
	Captured  int64             `json:"captured"`
	Released  int64             `json:"released"`
	Refunded  int64             `json:"refunded"`
	State     orderly.HoldState `json:"state"`
	ExpiresAt time.Time         `json:"expires_at"`
}

func simHoldView(h *store.SimHold) *SimHold {
	return &SimHold{ID: h.ID, Amount: h.Amount, Captured: h.Captured, Released: h.Released, Refunded: h.Refunded,
		State: h.State, ExpiresAt: h.ExpiresAt}
}

// UseStore keeps the gateway's holds, the keys of their captures, voids and refunds, and
// the armed TimeoutAfterApply faults in st (tables sim_holds, sim_hold_keys,
// sim_gateway_faults), so that every instance on one database sees the holds any of them
// placed and a killed instance loses none. Without it the hold calls fail. The engine calls
// it with its store.
func (g *SimGateway) UseStore(st store.Store) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st = st
}

func (g *SimGateway) holdStore() (store.Store, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.st == nil {
		return nil, errNoHoldStore
	}
	return g.st, nil
}

// SetClock replaces the gateway's clock that hold expiries are judged by and ledger entries
// stamped with (nil: the database's clock for holds, time.Now for the ledger); tests move it.
func (g *SimGateway) SetClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

// holdNow returns the time holds are judged by: the test clock, or the database's.
func (g *SimGateway) holdNow(ctx context.Context, tx store.Tx) (time.Time, error) {
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
// ErrGatewayTimeout, as a gateway whose reply is lost: a retry with the same idempotency
// key must not apply it twice. n ≤ 0 disarms it.
func (g *SimGateway) TimeoutAfterApply(ctx context.Context, op GatewayOp, n int) error {
	st, err := g.holdStore()
	if err != nil {
		return err
	}
	return st.InTx(ctx, func(tx store.Tx) error { return tx.SimGatewayFaultArm(ctx, string(op), n) })
}

// Authorize places a hold of amount minor units until now + ttl (the gateway's clock,
// rounded up to the millisecond). The hold id is the idempotency key: authorising it again
// with the same amount returns the hold (a replay, recorded); with another amount it is
// EIDEMPOTENCY. Errors: EINVALID (amount ≤ 0, ttl ≤ 0), EIDEMPOTENCY, ErrGatewayTimeout
// when a fault is armed, the store's.
func (g *SimGateway) Authorize(ctx context.Context, holdID string, amount int64, ttl time.Duration) (*SimHold, error) {
	if amount <= 0 || ttl <= 0 {
		g.recordLocked(GatewayCall{Op: GatewayAuthorize, PaymentID: holdID, Amount: amount, IdempotencyKey: holdID})
		return nil, orderly.Errorf(orderly.EINVALID, "authorize %s: amount and ttl must be positive", holdID)
	}
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var (
		h       *store.SimHold
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
		h = &store.SimHold{ID: holdID, Amount: amount, State: orderly.HoldPending, ExpiresAt: expires, CreatedAt: now}
		if err := tx.SimHoldInsert(ctx, h); err != nil {
			return err
		}
		timeout, err = tx.SimGatewayFaultTake(ctx, string(GatewayAuthorize))
		return err
	})
	replay := orderly.ErrorCode(err) == orderly.ECONFLICT
	if replay {
		err = st.InTx(ctx, func(tx store.Tx) error {
			if h, err = tx.SimHoldGet(ctx, holdID); err != nil {
				return err
			}
			timeout, err = tx.SimGatewayFaultTake(ctx, string(GatewayAuthorize))
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
		return simHoldView(h), ErrGatewayTimeout
	}
	return simHoldView(h), nil
}

// CaptureHold captures amount (1 … the hold's amount) of a pending hold and releases the
// rest, once per idempotency key: the same key and amount again is a replay (recorded, no
// money moves) and returns the hold; the same key for another operation or amount is
// EIDEMPOTENCY. A capture at or after the hold's expiry is EHOLDEXPIRED (and the hold
// expires); more than the hold is EHOLDEXCEEDED; a hold captured or voided under another
// key is EHOLDNOTPENDING; an unknown hold ENOTFOUND. With a fault armed
// (TimeoutAfterApply) it captures, then answers ErrGatewayTimeout.
func (g *SimGateway) CaptureHold(ctx context.Context, holdID, key string, amount int64) (*SimHold, error) {
	return g.resolveHold(ctx, GatewayCaptureHold, holdID, key, amount)
}

// VoidHold releases a pending hold in full, once per idempotency key, with the rules of
// CaptureHold.
func (g *SimGateway) VoidHold(ctx context.Context, holdID, key string) (*SimHold, error) {
	return g.resolveHold(ctx, GatewayVoidHold, holdID, key, 0)
}

// resolveHold captures or voids a hold in one transaction: the hold's row locked first (so
// two calls on one hold, whatever their keys, take turns), then its key looked up, the
// change and the key written, and an armed fault consumed.
func (g *SimGateway) resolveHold(ctx context.Context, op GatewayOp, holdID, key string, amount int64) (*SimHold, error) {
	if key == "" {
		g.recordLocked(GatewayCall{Op: op, PaymentID: holdID, Amount: amount})
		return nil, orderly.Errorf(orderly.EINVALID, "%s %s: an idempotency key is required", op, holdID)
	}
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var (
		out             *store.SimHold
		replay, timeout bool
		refusal         error // committed: an expiry found on the way is written
	)
	err = st.InTx(ctx, func(tx store.Tx) error {
		replay, timeout, refusal = false, false, nil
		h, err := tx.SimHoldLock(ctx, holdID)
		if err != nil {
			return err
		}
		out = h
		if prev, err := tx.SimHoldKeyGet(ctx, key); err == nil {
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
			if _, err := tx.SimHoldResolve(ctx, h); err != nil {
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
		if ok, err := tx.SimHoldResolve(ctx, h); err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.ECONFLICT, "hold %s changed concurrently; retry", holdID)
		}
		if err := tx.SimHoldKeyInsert(ctx, &store.SimHoldKey{Key: key, HoldID: holdID, Op: string(op), Amount: amount, CreatedAt: now}); err != nil {
			return err
		}
		timeout, err = tx.SimGatewayFaultTake(ctx, string(op))
		return err
	})
	g.recordLocked(GatewayCall{Op: op, PaymentID: holdID, Amount: amount, IdempotencyKey: key, Replay: replay})
	switch {
	case err != nil:
		return nil, err
	case refusal != nil:
		return nil, refusal
	case timeout:
		return simHoldView(out), ErrGatewayTimeout
	}
	return simHoldView(out), nil
}

// RefundHold gives back amount minor units of what a hold captured, once per idempotency
// key: the same key and amount again is a replay (recorded as a refund replay, no money
// moves); the same key for another amount or hold is ECONFLICT. Errors: EINVALID (amount ≤
// 0, no key), ENOTFOUND (no such hold), EREFUNDEXCEEDS (more than captured and not yet
// refunded), the store's.
func (g *SimGateway) RefundHold(ctx context.Context, holdID, key string, amount int64) error {
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
		if _, err := tx.SimHoldLock(ctx, holdID); err != nil {
			return err
		}
		if prev, err := tx.SimHoldKeyGet(ctx, key); err == nil {
			replay = true
			if prev.HoldID != holdID || prev.Op != string(GatewayRefund) || prev.Amount != amount {
				return orderly.Errorf(orderly.ECONFLICT, "refund key %s was used for a %s of %d on hold %s", key, prev.Op, prev.Amount, prev.HoldID)
			}
			return nil
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		if ok, err := tx.SimHoldRefund(ctx, holdID, amount); err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.EREFUNDEXCEEDS, "hold %s: a refund of %d is more than it captured and did not refund", holdID, amount)
		}
		now, err := g.holdNow(ctx, tx)
		if err != nil {
			return err
		}
		return tx.SimHoldKeyInsert(ctx, &store.SimHoldKey{Key: key, HoldID: holdID, Op: string(GatewayRefund), Amount: amount, CreatedAt: now})
	})
	g.recordLocked(GatewayCall{Op: GatewayRefund, PaymentID: holdID, Amount: amount, IdempotencyKey: key, Replay: replay,
		Refused: err != nil && !replay})
	return err
}

// Hold returns a hold as the gateway sees it now (expired, released in full, once its
// expiry passed, even before a call processed it); ENOTFOUND if there is none.
func (g *SimGateway) Hold(ctx context.Context, holdID string) (*SimHold, error) {
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var out *SimHold
	err = st.Read(ctx, func(tx store.Tx) error {
		h, err := tx.SimHoldGet(ctx, holdID)
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
		out = simHoldView(h)
		return nil
	})
	return out, err
}

// HoldKeys returns what each capture, void and refund key applied to a hold, oldest
// first: one capture key per hold means it was never captured twice.
func (g *SimGateway) HoldKeys(ctx context.Context, holdID string) ([]*store.SimHoldKey, error) {
	st, err := g.holdStore()
	if err != nil {
		return nil, err
	}
	var out []*store.SimHoldKey
	err = st.Read(ctx, func(tx store.Tx) error {
		var err error
		out, err = tx.SimHoldKeys(ctx, holdID)
		return err
	})
	return out, err
}

// Calls returns the calls of one operation on one hold (or payment) id that this process
// received and were not replays of an idempotency key (refused calls included), in order.
func (g *SimGateway) Calls(op GatewayOp, id string) []GatewayCall {
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
func (g *SimGateway) recordLocked(c GatewayCall) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.record(c)
}

// clock returns the gateway's time for the ledger; g.mu is held.
func (g *SimGateway) clock() time.Time {
	if g.now != nil {
		return g.now().UTC()
	}
	return time.Now().UTC()
}

// IsGatewayTimeout reports whether err is a gateway call whose outcome is unknown.
func IsGatewayTimeout(err error) bool { return errors.Is(err, ErrGatewayTimeout) }
