package payment

import (
	"context"
	"sync"

	"github.com/orderlyhq/orderly"
)

// SimGateway is the built-in simulated payment gateway, the default of `orderly serve`. It
// keeps attempts in memory (one small entry per attempt, for the process's life): Create
// makes an attempt pending, Capture (called by tests and demos) captures it, Cancel fails a
// pending attempt, Refund records a refund. Callbacks are not sent by the gateway: a demo
// or `orderly simulate` posts them, playing the provider.
type SimGateway struct {
	mu       sync.Mutex
	payments map[string]*simPayment
}

type simPayment struct {
	status   orderly.GatewayStatus
	amount   int64
	txnID    string
	refunded int64
}

var _ orderly.Gateway = (*SimGateway)(nil)

// NewSimGateway returns an empty simulated gateway.
func NewSimGateway() *SimGateway {
	return &SimGateway{payments: map[string]*simPayment{}}
}

// Create implements orderly.Gateway.
func (g *SimGateway) Create(_ context.Context, p *orderly.Payment) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.payments[p.ID]; !ok {
		g.payments[p.ID] = &simPayment{status: orderly.GatewayPending, amount: p.Amount}
	}
	return nil
}

// Query implements orderly.Gateway; an attempt it never saw (created before a restart)
// is pending, so that inspection cancels it instead of holding its order open.
func (g *SimGateway) Query(_ context.Context, paymentID string) (*orderly.GatewayPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.payments[paymentID]; !ok {
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	}
	return g.view(paymentID), nil
}

// Cancel implements orderly.Gateway. An attempt the simulated gateway never saw (its
// memory starts empty at every restart) is recorded as cancelled: nobody can pay it
// through this gateway any more, and money arriving by callback later is refunded.
func (g *SimGateway) Cancel(_ context.Context, paymentID string) (*orderly.GatewayPayment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
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

// Refund implements orderly.Gateway. The simulated gateway refunds whatever it is asked
// to, once per payment id; payments captured outside its view (callbacks posted by a demo)
// are refunded too.
func (g *SimGateway) Refund(_ context.Context, paymentID string, amount int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.payments[paymentID]
	if !ok {
		p = &simPayment{status: orderly.GatewaySucceeded, amount: amount}
		g.payments[paymentID] = p
	}
	p.refunded = amount
	return nil
}

// Capture marks a pending attempt captured with the given channel transaction id and
// reports whether it did (false when unknown, failed or already captured).
func (g *SimGateway) Capture(paymentID, channelTxnID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	p, ok := g.payments[paymentID]
	if !ok || p.status != orderly.GatewayPending {
		return false
	}
	p.status, p.txnID = orderly.GatewaySucceeded, channelTxnID
	return true
}

// Refunded returns the amount refunded for a payment, in minor units.
func (g *SimGateway) Refunded(paymentID string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.payments[paymentID]; ok {
		return p.refunded
	}
	return 0
}

func (g *SimGateway) view(paymentID string) *orderly.GatewayPayment {
	p, ok := g.payments[paymentID]
	if !ok {
		return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}
	}
	return &orderly.GatewayPayment{Status: p.status, ChannelTxnID: p.txnID, Amount: p.amount}
}
