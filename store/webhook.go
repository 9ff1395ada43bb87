package store

import (
	"context"

	"github.com/orderlyhq/orderly"
)

// WebhookTx holds the queries of merchant webhook subscribers (package webhook). It is
// part of Tx.
type WebhookTx interface {
	// WebhookInsert writes a subscriber. ECONFLICT when the id exists.
	WebhookInsert(ctx context.Context, w *orderly.Webhook) error
	// WebhookGet returns a subscriber with its secret; ENOTFOUND if there is none.
	WebhookGet(ctx context.Context, id string) (*orderly.Webhook, error)
	// WebhookList returns every subscriber with its secret, by id (a short table: a merchant
	// has a few endpoints).
	WebhookList(ctx context.Context) ([]*orderly.Webhook, error)
	// WebhookDelete deletes a subscriber and reports whether it existed. Its deliveries
	// still pending are dropped when the relay reaches them.
	WebhookDelete(ctx context.Context, id string) (bool, error)
}
