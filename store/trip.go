package store

import (
	"context"

	"github.com/orderlyhq/orderly"
)

// TripTx holds the queries of trips, the money of ride-hailing trips (package ride; table
// trips, migration 00015). A trip's state is its order's: the queries read it from orders.
// It is part of Tx.
type TripTx interface {
	// TripInsert writes a new trip (its order row first); Version is written as given (1).
	TripInsert(ctx context.Context, t *orderly.Trip) error
	// TripGet returns a trip with its order's state and close reason; ENOTFOUND if there is
	// none.
	TripGet(ctx context.Context, id string) (*orderly.Trip, error)
	// TripUpdate writes the mutable figures of t (driver, fare, fees, captured, released,
	// extra, collection due, payout, refunded, saga ids, updated_at) guarded by its version:
	// only when the row's version is still t.Version, which it then bumps (t.Version too).
	// It reports false, changing nothing, when the row changed since t was read.
	TripUpdate(ctx context.Context, t *orderly.Trip) (bool, error)
	// TripList returns up to Limit trips with id > AfterID, by id (verify reads them all).
	TripList(ctx context.Context, params *ListParams) ([]*orderly.Trip, error)
}
