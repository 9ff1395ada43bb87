package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/orderlyhq/orderly"
)

// AdminTx holds the queries of the operator routes and of reconciliation (package
// reconcile): the audit of operator actions, the order search, the dead letters, the
// consistency scans and their reports. It is part of Tx. Every list is keyset-paginated
// (never OFFSET): a page starts after the last key of the previous one.
type AdminTx interface {
	// OperatorActionInsert records one operator action (a.ID is set). Detail must be a
	// JSON object; nil is stored as {}.
	OperatorActionInsert(ctx context.Context, a *OperatorAction) error
	// OperatorActionList returns up to Limit actions, newest first, with id < BeforeID
	// when BeforeID > 0, on Target when Target is set.
	OperatorActionList(ctx context.Context, params *OperatorActionListParams) ([]*OperatorAction, error)

	// OrderSearch returns up to Limit orders with id > AfterID that match every filter
	// set, by id (ids are time-ordered UUIDv7, so by creation).
	OrderSearch(ctx context.Context, params *OrderSearchParams) ([]*orderly.Order, error)

	// OutboxDeadList returns up to Limit dead messages with id > AfterID that match the
	// filters set, by id.
	OutboxDeadList(ctx context.Context, params *OutboxFilter) ([]*orderly.Message, error)
	// OutboxStuckList returns up to Limit pending messages with id > AfterID whose
	// next_attempt_at is before Before (due long ago and still not delivered), by id.
	OutboxStuckList(ctx context.Context, before time.Time, afterID int64, limit int) ([]*orderly.Message, error)
	// OutboxKeyUndelivered returns up to limit pending and dead messages of one key, by id.
	OutboxKeyUndelivered(ctx context.Context, key string, limit int) ([]*orderly.Message, error)
	// OutboxDiscard deletes a dead message and returns it as it was; ENOTFOUND when there
	// is no dead message with that id (none, or pending or delivered: only dead ones go).
	OutboxDiscard(ctx context.Context, id int64) (*orderly.Message, error)

	// ReconcileClosedPaid returns up to limit payments in state succeeded whose order is
	// closed (money kept for an order that does not take it), with id > afterID, by id.
	ReconcileClosedPaid(ctx context.Context, afterID string, limit int) ([]*orderly.Payment, error)
	// ReconcileClosedHeld returns up to limit closed orders with id > afterID that still
	// have a held reservation or a coupon frozen for them, by id.
	ReconcileClosedHeld(ctx context.Context, afterID string, limit int) ([]*orderly.Order, error)
	// ReconcileClosedPaying returns up to limit closed orders with id > afterID, closed at
	// or before closedBy, whose pay_status is still paying and whose current attempt is
	// still initiated (in flight at the close, and nothing settled it), with no pending
	// payment.cancel message for it (orderly.EffectCancelPayment), by id.
	ReconcileClosedPaying(ctx context.Context, closedBy time.Time, afterID string, limit int) ([]*orderly.Order, error)
	// ReconcilePaidUnbacked returns up to limit orders with pay_status paid and id >
	// afterID that have no payment in succeeded, refund_pending or refunded, by id.
	ReconcilePaidUnbacked(ctx context.Context, afterID string, limit int) ([]*orderly.Order, error)
	// ReconcilePaymentsCaptured returns up to limit payments of channel ("" for every
	// channel; its variants included) with a channel transaction id that captured money
	// (succeeded, refund_pending or refunded) with from <= succeeded_at <= to and id >
	// afterID, by id: the other side of a gateway's settlement statement.
	ReconcilePaymentsCaptured(ctx context.Context, channel string, from, to time.Time, afterID string, limit int) ([]*orderly.Payment, error)
	// ReconcileRefundsStuck returns up to limit refunds still requested whose provider
	// answered a non-final state (provider_status not empty), created before
	// createdBefore, with id > afterID, by id: accepted by the provider and never
	// confirmed nor failed.
	ReconcileRefundsStuck(ctx context.Context, createdBefore time.Time, afterID string, limit int) ([]*orderly.Refund, error)
	// ReconcileRefundsSucceeded returns up to limit succeeded refunds of channel's payments
	// ("" for every channel; its variants included) with from <= completed_at <= to and
	// id > afterID, by id: the refunds side of a gateway's settlement statement.
	ReconcileRefundsSucceeded(ctx context.Context, channel string, from, to time.Time, afterID string, limit int) ([]*orderly.Refund, error)
	// StockLedgers returns up to limit SKUs with sku > afterSKU, by SKU, each with its
	// counters and the figures its reservations give (the ledger).
	StockLedgers(ctx context.Context, afterSKU string, limit int) ([]*StockLedger, error)
	// StockLedgerGet is StockLedgers for one SKU; ENOTFOUND if there is none.
	StockLedgerGet(ctx context.Context, sku string) (*StockLedger, error)
	// StockCorrect sets a SKU's held and sold to its ledger's figures and moves the
	// difference to or from available (so available + held + sold is unchanged), guarded:
	// only while held and sold still read FromHeld and FromSold and available stays >= 0.
	// It reports whether the row changed.
	StockCorrect(ctx context.Context, params *StockCorrectParams) (bool, error)

	// ReconcileReportInsert records a reconciliation report (r.ID is set).
	ReconcileReportInsert(ctx context.Context, r *ReconcileReport) error
	// ReconcileReportList returns up to limit reports, newest first.
	ReconcileReportList(ctx context.Context, limit int) ([]*ReconcileReport, error)
}

// OperatorAction is one audited operator action: who did what to which target, why, and
// under which trace.
type OperatorAction struct {
	ID       int64     `json:"id"`
	At       time.Time `json:"at"`
	Operator string    `json:"operator"` // a name: the Orderly-Operator header, "admin", "reconcile"
	Action   string    `json:"action"`   // redrive, discard, repair:<finding kind>
	Target   string    `json:"target"`   // an outbox message id, an order id, a SKU
	Reason   string    `json:"reason,omitempty"`
	// Detail is a JSON object: what was seen and what was done.
	Detail  json.RawMessage `json:"detail"`
	TraceID string          `json:"trace_id,omitempty"`
}

// OperatorActionListParams is the input of Tx.OperatorActionList.
type OperatorActionListParams struct {
	Target   string // "" for every target
	BeforeID int64  // 0 for the newest
	Limit    int
}

// OrderSearchParams is the input of Tx.OrderSearch. Zero-valued filters are not applied.
// Time ranges are half-open: From <= t < To.
type OrderSearchParams struct {
	UserID      string
	State       orderly.State
	Flow        string
	CreatedFrom time.Time
	CreatedTo   time.Time
	// ClosedFrom and ClosedTo filter on closed_at; either one set leaves out orders that
	// are not closed.
	ClosedFrom time.Time
	ClosedTo   time.Time
	AfterID    string
	Limit      int
}

// OutboxFilter selects messages: zero-valued filters are not applied; the created range
// is half-open (CreatedFrom <= created_at < CreatedTo).
type OutboxFilter struct {
	Topic       string
	CreatedFrom time.Time
	CreatedTo   time.Time
	AfterID     int64
	Limit       int
}

// StockLedger is one SKU's counters beside what its reservations give: LedgerHeld is the
// sum of its held reservations' quantities, LedgerSold the sum over its committed ones of
// quantity − restocked (units refunded back to stock leave sold).
type StockLedger struct {
	SKU        string `json:"sku"`
	Available  int64  `json:"available"`
	Held       int64  `json:"held"`
	Sold       int64  `json:"sold"`
	LedgerHeld int64  `json:"ledger_held"`
	LedgerSold int64  `json:"ledger_sold"`
}

// Agrees reports whether the counters equal the ledger.
func (l *StockLedger) Agrees() bool { return l.Held == l.LedgerHeld && l.Sold == l.LedgerSold }

// StockCorrectParams is the input of Tx.StockCorrect.
type StockCorrectParams struct {
	SKU      string
	FromHeld int64 // guard: the counters as read
	FromSold int64
	ToHeld   int64
	ToSold   int64
}

// ReconcileReport is the record of one reconciliation run: its findings as JSON (package
// reconcile's Report) and their counts.
type ReconcileReport struct {
	ID         int64           `json:"id"`
	Instance   string          `json:"instance"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	Findings   int64           `json:"findings"`
	Repaired   int64           `json:"repaired"`
	Report     json.RawMessage `json:"report"`
}
