package store

import (
	"context"
	"time"
)

// ChannelEventTx holds the queries of channel_events, the record of payment providers'
// notifications that orderly acted on (package channel). It is part of Tx.
type ChannelEventTx interface {
	// ChannelEventInsert records a notification once per (Channel, EventID): it reports
	// inserted=false, and changes nothing, when the pair is recorded already (a provider's
	// retry or duplicate). A concurrent insert of the same pair waits for the other
	// transaction and then reports false if it committed. Kind must be one of the kinds of
	// package channel (a CHECK constraint).
	ChannelEventInsert(ctx context.Context, e *ChannelEvent) (inserted bool, err error)
	// ChannelEventList returns up to limit recorded notifications that named paymentID,
	// oldest first.
	ChannelEventList(ctx context.Context, paymentID string, limit int) ([]*ChannelEvent, error)
}

// ChannelEvent is one recorded provider notification.
type ChannelEvent struct {
	Channel    string    // the adapter's name, e.g. "stripe"; at most 64 bytes
	EventID    string    // the provider's event id, stable across its retries; at most 255 bytes
	Kind       string    // channel.Kind: payment_succeeded, payment_failed, …
	PaymentID  string    // orderly's payment id the notification named; "" when none
	ReceivedAt time.Time // database clock, when it was recorded
}
