// Package wakeup is the engine's orderly.Signals: the services get a Hub when they are
// built, and the engine connects it to the timer and the outbox relay once those are built,
// before anything runs.
package wakeup

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
)

// Timer is what the hub wakes for deadlines (closer.Closer).
type Timer interface {
	// Created is told of an order committed with its close_at.
	Created(ctx context.Context, id string, closeAt time.Time)
	// Deadline is told of something timed committed with its deadline.
	Deadline(ctx context.Context, at time.Time)
}

// Relay is what the hub wakes for outbox messages (outbox.Relay).
type Relay interface{ Notify() }

// Hub implements orderly.Signals. Signals before Connect are dropped: nothing runs yet to
// be woken, and the timer and the relay read the database when they start. Safe for
// concurrent use.
type Hub struct {
	timer atomic.Pointer[Timer]
	relay atomic.Pointer[Relay]
}

var _ orderly.Signals = (*Hub)(nil)

// Connect sends the hub's signals to timer and relay (either may be nil: dropped).
func (h *Hub) Connect(timer Timer, relay Relay) {
	if timer != nil {
		h.timer.Store(&timer)
	}
	if relay != nil {
		h.relay.Store(&relay)
	}
}

// OrderCreated implements orderly.Signals.
func (h *Hub) OrderCreated(ctx context.Context, id string, closeAt time.Time) {
	if t := h.timer.Load(); t != nil {
		(*t).Created(ctx, id, closeAt)
	}
}

// Deadline implements orderly.Signals.
func (h *Hub) Deadline(ctx context.Context, at time.Time) {
	if t := h.timer.Load(); t != nil {
		(*t).Deadline(ctx, at)
	}
}

// OutboxWritten implements orderly.Signals.
func (h *Hub) OutboxWritten() {
	if r := h.relay.Load(); r != nil {
		(*r).Notify()
	}
}
