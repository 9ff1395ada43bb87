package payment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
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

// SimHold is a hold of the simulated gateway: Amount (minor units) authorised on a card
// until ExpiresAt (the gateway's clock), then Captured (≤ Amount, once) and the rest
// released, or voided, or expired.
type SimHold struct {
	ID        string            `json:"id"`
	Amount    int64             `json:"amount"`
	Captured  int64             `json:"captured"`
	Released  int64             `json:"released"`
	State     orderly.HoldState `json:"state"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// simHoldKey is what one capture or void key applied: to which hold, which operation, how
// much.
type simHoldKey struct {
	holdID string
	op     GatewayOp
	amount int64
}

// SetClock replaces the gateway's clock (time.Now) that hold expiries are judged by and
// ledger entries stamped with; tests move it.
func (g *SimGateway) SetClock(now func() time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now = now
}

// TimeoutAfterApply makes the next n calls of op (GatewayCaptureHold, GatewayVoidHold,
// GatewayAuthorize) apply their effect and then answer ErrGatewayTimeout, as a gateway
// whose reply is lost: a retry with the same idempotency key must not apply it twice.
func (g *SimGateway) TimeoutAfterApply(op GatewayOp, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.timeouts == nil {
		g.timeouts = map[GatewayOp]int{}
	}
	g.timeouts[op] = n
}

// afterApply returns ErrGatewayTimeout when a fault is armed for op (consuming it); g.mu
// is held.
func (g *SimGateway) afterApply(op GatewayOp) error {
	if g.timeouts[op] > 0 {
		g.timeouts[op]--
		return ErrGatewayTimeout
	}
	return nil
}

// Authorize places a hold of amount minor units until now + ttl (the gateway's clock).
// The hold id is the idempotency key: authorising it again with the same amount returns
// the hold (a replay, recorded); with another amount it is EIDEMPOTENCY. Errors: EINVALID
// (amount ≤ 0, ttl ≤ 0), EIDEMPOTENCY, ErrGatewayTimeout when a fault is armed.
func (g *SimGateway) Authorize(_ context.Context, holdID string, amount int64, ttl time.Duration) (*SimHold, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, replay := g.holds[holdID]
	g.record(GatewayCall{Op: GatewayAuthorize, PaymentID: holdID, Amount: amount, IdempotencyKey: holdID, Replay: replay})
	switch {
	case amount <= 0 || ttl <= 0:
		return nil, orderly.Errorf(orderly.EINVALID, "authorize %s: amount and ttl must be positive", holdID)
	case replay && h.Amount != amount:
		return nil, orderly.Errorf(orderly.EIDEMPOTENCY, "hold %s was authorised for %d, not %d", holdID, h.Amount, amount)
	case !replay:
		h = &SimHold{ID: holdID, Amount: amount, State: orderly.HoldPending, ExpiresAt: g.clock().Add(ttl)}
		g.holds[holdID] = h
	}
	out := g.holdView(h)
	return out, g.afterApply(GatewayAuthorize)
}

// CaptureHold captures amount (1 … the hold's amount) of a pending hold and releases the
// rest, once per idempotency key: the same key and amount again is a replay (recorded, no
// money moves) and returns the hold; the same key for another operation or amount is
// EIDEMPOTENCY. A capture at or after the hold's expiry is EHOLDEXPIRED (and the hold
// expires); more than the hold is EHOLDEXCEEDED; a hold captured or voided under another
// key is EHOLDNOTPENDING; an unknown hold ENOTFOUND. With a fault armed
// (TimeoutAfterApply) it captures, then answers ErrGatewayTimeout.
func (g *SimGateway) CaptureHold(_ context.Context, holdID, key string, amount int64) (*SimHold, error) {
	return g.resolveHold(GatewayCaptureHold, holdID, key, amount)
}

// VoidHold releases a pending hold in full, once per idempotency key, with the rules of
// CaptureHold.
func (g *SimGateway) VoidHold(_ context.Context, holdID, key string) (*SimHold, error) {
	return g.resolveHold(GatewayVoidHold, holdID, key, 0)
}

func (g *SimGateway) resolveHold(op GatewayOp, holdID, key string, amount int64) (*SimHold, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, replay := g.holdKeys[key]
	g.record(GatewayCall{Op: op, PaymentID: holdID, Amount: amount, IdempotencyKey: key, Replay: replay})
	if key == "" {
		return nil, orderly.Errorf(orderly.EINVALID, "%s %s: an idempotency key is required", op, holdID)
	}
	h, ok := g.holds[holdID]
	if !ok {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "hold %s not found", holdID)
	}
	if replay {
		if prev != (simHoldKey{holdID: holdID, op: op, amount: amount}) {
			return nil, orderly.Errorf(orderly.EIDEMPOTENCY, "key %s was used for a %s of %d on hold %s", key, prev.op, prev.amount, prev.holdID)
		}
		return g.holdView(h), nil
	}
	g.expireHold(h)
	switch {
	case h.State == orderly.HoldExpired:
		return nil, orderly.Errorf(orderly.EHOLDEXPIRED, "hold %s expired at %s", holdID, h.ExpiresAt.Format(time.RFC3339Nano))
	case h.State != orderly.HoldPending:
		return nil, orderly.Errorf(orderly.EHOLDNOTPENDING, "hold %s is %s already", holdID, h.State)
	case op == GatewayCaptureHold && (amount <= 0 || amount > h.Amount):
		if amount <= 0 {
			return nil, orderly.Errorf(orderly.EINVALID, "capture of hold %s: amount must be positive", holdID)
		}
		return nil, orderly.Errorf(orderly.EHOLDEXCEEDED, "hold %s holds %d; a capture of %d is more", holdID, h.Amount, amount)
	}
	if op == GatewayCaptureHold {
		h.State, h.Captured, h.Released = orderly.HoldPosted, amount, h.Amount-amount
	} else {
		h.State, h.Released = orderly.HoldVoided, h.Amount
	}
	g.holdKeys[key] = simHoldKey{holdID: holdID, op: op, amount: amount}
	return g.holdView(h), g.afterApply(op)
}

// Hold returns a hold as the gateway sees it now (expired once its expiry passed), and
// whether it exists.
func (g *SimGateway) Hold(holdID string) (*SimHold, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h, ok := g.holds[holdID]
	if !ok {
		return nil, false
	}
	g.expireHold(h)
	return g.holdView(h), true
}

// Calls returns the calls of one operation on one hold (or payment) id that were not
// replays of an idempotency key (refused calls included), in order.
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

// expireHold moves a pending hold past its expiry to expired, releasing it; g.mu is held.
func (g *SimGateway) expireHold(h *SimHold) {
	if h.State == orderly.HoldPending && !g.clock().Before(h.ExpiresAt) {
		h.State, h.Released = orderly.HoldExpired, h.Amount
	}
}

func (g *SimGateway) holdView(h *SimHold) *SimHold {
	c := *h
	return &c
}

// clock returns the gateway's time; g.mu is held.
func (g *SimGateway) clock() time.Time {
	if g.now != nil {
		return g.now().UTC()
	}
	return time.Now().UTC()
}

// IsGatewayTimeout reports whether err is a gateway call whose outcome is unknown.
func IsGatewayTimeout(err error) bool { return errors.Is(err, ErrGatewayTimeout) }
