package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// OverviewTx holds the reads of the operator's overview (package admin, the admin page at
// /admin): how many orders each state holds and which deadlines come next. It is part of
// Tx.
type OverviewTx interface {
	// OrderStateCounts returns the number of orders in each flow and state that has any,
	// by flow then state. It reads every row of orders (one GROUP BY; no index or counter
	// holds (flow, state), see sqlstore's plan_test.go): a read for an operator's page, not
	// for a hot path or a metrics scrape.
	OrderStateCounts(ctx context.Context) ([]*StateCount, error)
	// OrdersNextWake returns up to limit open orders (in a timed state, wake_at set),
	// earliest wake_at first, ties by id: the next moments the timer acts on an order (its
	// close, or the inspection of a payment in flight). It reads the wake_at index.
	OrdersNextWake(ctx context.Context, limit int) ([]*DueOrder, error)
	// GroupsByState returns up to params.Limit group-buy groups in params.State with id >
	// params.AfterID, by id, each as GroupGet returns it (seats counted, no members); with
	// params.DeadlineBefore set, only those whose deadline_at is before it (a forming group
	// past its deadline is one the timer has not failed yet).
	GroupsByState(ctx context.Context, params *GroupsByStateParams) ([]*orderly.Group, error)
}

// GroupsByStateParams is the input of Tx.GroupsByState.
type GroupsByStateParams struct {
	State          orderly.GroupState
	DeadlineBefore time.Time // zero: any deadline
	AfterID        string
	Limit          int
}

// StateCount is the number of orders of one flow in one state.
type StateCount struct {
	Flow  string        `json:"flow"`
	State orderly.State `json:"state"`
	Count int64         `json:"count"`
}
