// Package sim is the simulated payment channel "sim", the default of `orderly serve` when no
// real channel is configured: a gateway that moves no money, with card holds kept in tables
// of its own (migrations/), created only in databases that serve the channel.
package sim

import (
	"context"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// Gateway is the simulated payment gateway of channel "sim". It
// keeps attempts in memory (one small entry per attempt, for the process's life): Create
// makes an attempt pending, Capture (called by tests and demos) captures it, Cancel fails a
// pending attempt, Refund moves money back once per idempotency key. Callbacks are not sent
// by the gateway: a demo or `orderly simulate` posts them, playing the provider.
//
// Every call is also appended to a ledger (Ledger), as a provider's statement would list
// them, so that tests and `orderly simulate` (in process) can count what the engine asked
// for: one refund per refunded payment, for its amount. The ledger grows by one entry per
// call for the process's life; it is a test and demo tool, like the gateway itself.
type Gateway struct {
	mu       sync.Mutex
	payments map[string]*simPayment
	refunds  map[string]int64 // idempotency key → amount of the refund it moved
	ledger   []GatewayCall
	// Holds (hold.go) live in db (UseDatabase); now is the test clock (nil: the
	// database's for holds, time.Now for the ledger).
	db  *sqlstore.DB
	now func() time.Time
	// refusals: payment id → why every refund of it is refused (RefuseRefunds).
	refusals map[string]string
}

type simPayment struct {
	status   orderly.GatewayStatus
	amount   int64
	txnID    string
	refunded int64
}

// GatewayOp names the kind of a call in the ledger.
type GatewayOp string

// Calls of orderly.Gateway, as recorded in the ledger.
const (
	GatewayCreate GatewayOp = "create"
	GatewayQuery  GatewayOp = "query"
	GatewayCancel GatewayOp = "cancel"
	GatewayRefund GatewayOp = "refund"
)

// GatewayCall is one call the simulated gateway received.
type GatewayCall struct {
	// Seq numbers the calls 1, 2, … in the order they arrived.
	Seq int64     `json:"seq"`
	Op  GatewayOp `json:"op"`
	// PaymentID is the attempt the call is about.
	PaymentID string `json:"payment_id"`
	// Amount is in minor units: the attempt's amount for create, the refund's for refund,
	// 0 for query and cancel.
	Amount int64 `json:"amount"`
	// IdempotencyKey is what the gateway de-duplicates a refund on: the refund id of a
	// merchant refund, "payment:<id>" for the refund of a whole payment (see
	// payment.PaymentRefundKey). "" for the other calls.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Replay is true for a refund whose idempotency key an earlier refund used: the gateway
	// answered as before and moved no money.
	Replay bool `json:"replay,omitempty"`
	// Refused is true for a refund the gateway refused (RefuseRefunds): no money moved.
	Refused bool `json:"refused,omitempty"`
	// At is the gateway's clock (UTC) when the call arrived.
	At time.Time `json:"at"`
}

var (
	_ orderly.Gateway     = (*Gateway)(nil)
	_ orderly.HoldGateway = (*Gateway)(nil)
)

// New returns an empty simulated gateway; its holds need UseDatabase.
func New() *Gateway {
	return &Gateway{payments: map[string]*simPayment{}, refunds: map[string]int64{}}
}

// record appends a call to the ledger; g.mu is held.
func (g *Gateway) record(c GatewayCall) {
	c.Seq = int64(len(g.ledger)) + 1
	c.At = g.clock()
	g.ledger = append(g.ledger, c)
}

// Create implements orderly.Gateway.
// The simulated gateway needs no handoff: its client step is the signed callback.
func (g *Gateway) Create(_ context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.record(GatewayCall{Op: GatewayCreate, PaymentID: p.ID, Amount: p.Amount})
	if _, ok := g.payments[p.ID]; !ok {
		g.payments[p.ID] = &simPayment{status: orderly.GatewayPending, amount: p.Amount}
	}
	return &orderly.GatewayAttempt{}, nil
}

// Query implements orderly.Gateway; an attempt it never saw (created before a restart)
// is pending, so that inspection cancels it instead of holding its order open.
func (g *Gateway) Query(_ context.Context, pay *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := pay.ID
	g.mu.Lock()
	defer g.mu.Unlock()
	g.record(GatewayCall{Op: GatewayQuery, PaymentID: paymentID})
	if _, ok := g.payments[paymentID]; !ok {
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	}
	return g.view(paymentID), nil
}

// Cancel implements orderly.Gateway. An attempt the simulated gateway never saw (its
// memory starts empty at every restart) is recorded as cancelled: nobody can pay it
// through this gateway any more, and money arriving by callback later is refunded.
func (g *Gateway) Cancel(_ context.Context, pay *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := pay.ID
	g.mu.Lock()
	defer g.mu.Unlock()
	g.record(GatewayCall{Op: GatewayCancel, PaymentID: paymentID})
	p, ok := g.payments[paymentID]
	if !ok {
		p = &simPayment{status: orderly.GatewayPending}
		g.payments[paymentID] = p
	}
	if p.status == orderly.GatewayPending {
		p.status = orderly.GatewayFailed
	}
	return g.view(paymentID), nil
}

// Refund implements orderly.Gateway: RefundWithKey with the refund's idempotency key, so
// the outbox calling it again after a crash refunds once. The simulated gateway confirms a
// refund at once.
func (g *Gateway) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	if err := g.RefundWithKey(ctx, r.PaymentID, r.IdempotencyKey, r.Amount); err != nil {
		return nil, err
	}
	return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
}

// QueryRefund implements orderly.Gateway: a refund made under r's key is succeeded; one
// never asked is ENOTFOUND.
func (g *Gateway) QueryRefund(_ context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	if _, ok := g.RefundedFor(r.IdempotencyKey); ok {
		return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
	}
	return nil, orderly.Errorf(orderly.ENOTFOUND, "no refund under key %s", r.IdempotencyKey)
}

// RefundedFor returns the amount refunded under one idempotency key (a refund id), in
// minor units, and whether any refund was made under it.
func (g *Gateway) RefundedFor(key string) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	amount, ok := g.refunds[key]
	return amount, ok
}

// RefundWithKey refunds amount minor units of a payment once per idempotency key, as
// providers do: a second call with the same key and amount is a replay (recorded, no money
// moves); with the same key and another amount it fails with ECONFLICT. Payments captured
// outside the gateway's view (callbacks posted by a demo) are refunded too.
func (g *Gateway) RefundWithKey(_ context.Context, paymentID, key string, amount int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev, replay := g.refunds[key]
	if reason, ok := g.refusals[paymentID]; ok && !replay {
		g.record(GatewayCall{Op: GatewayRefund, PaymentID: paymentID, Amount: amount, IdempotencyKey: key, Refused: true})
		return orderly.Errorf(orderly.EILLEGAL, "%s", reason)
	}
	g.record(GatewayCall{Op: GatewayRefund, PaymentID: paymentID, Amount: amount, IdempotencyKey: key, Replay: replay})
	if replay {
		if prev != amount {
			return orderly.Errorf(orderly.ECONFLICT, "refund key %s was used for %d, not %d", key, prev, amount)
		}
		return nil
	}
	g.refunds[key] = amount
	p, ok := g.payments[paymentID]
	if !ok {
		p = &simPayment{status: orderly.GatewaySucceeded, amount: amount}
		g.payments[paymentID] = p
	}
	p.refunded += amount
	return nil
}

// RefuseRefunds makes the gateway refuse every later refund of a payment with reason (an
// *orderly.Error, EILLEGAL: a refusal, not an unknown outcome), as a provider does for a
// trade it no longer refunds (Alipay's TRADE_FINISHED, a refund window that closed); no
// money moves. reason "" accepts its refunds again. A test and demo tool.
func (g *Gateway) RefuseRefunds(paymentID, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if reason == "" {
		delete(g.refusals, paymentID)
		return
	}
	if g.refusals == nil {
		g.refusals = map[string]string{}
	}
	g.refusals[paymentID] = reason
}

// Capture marks a pending attempt captured with the given channel transaction id and
// reports whether it did (false when unknown, failed or already captured).
func (g *Gateway) Capture(paymentID, channelTxnID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.payments[paymentID]
	if !ok || p.status != orderly.GatewayPending {
		return false
	}
	p.status, p.txnID = orderly.GatewaySucceeded, channelTxnID
	return true
}

// Refunded returns the amount refunded for a payment, in minor units: the sum of its
// refunds that moved money (replays excluded).
func (g *Gateway) Refunded(paymentID string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.payments[paymentID]; ok {
		return p.refunded
	}
	return 0
}

// Ledger returns a copy of every call received so far, in order of arrival.
func (g *Gateway) Ledger() []GatewayCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GatewayCall(nil), g.ledger...)
}

// Refunds returns the refunds of a payment that moved money (replays and refusals excluded), in order.
func (g *Gateway) Refunds(paymentID string) []GatewayCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []GatewayCall
	for _, c := range g.ledger {
		if c.Op == GatewayRefund && c.PaymentID == paymentID && !c.Replay && !c.Refused {
			out = append(out, c)
		}
	}
	return out
}

func (g *Gateway) view(paymentID string) *orderly.GatewayPayment {
	p, ok := g.payments[paymentID]
	if !ok {
		return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}
	}
	return &orderly.GatewayPayment{Status: p.status, ChannelTxnID: p.txnID, Amount: p.amount}
}
