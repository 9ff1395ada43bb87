package reconcile

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Kind names a kind of finding. The list is open: a package adds its own kinds with their
// Check (Config.Checks) — wallet holds past expiry, sagas that do not end — without
// touching this one.
type Kind string

// The built-in kinds (docs/operations/reconcile.md lists them with their repairs).
const (
	// KindClosedPaid: a closed order with a succeeded payment that nothing refunds (I2).
	// Repair: the payment service requests the refund (payment.Service.RefundUnkept).
	KindClosedPaid Kind = "closed_order_paid"
	// KindClosedHolds: a closed order whose reservations still read held or whose coupon
	// still reads frozen for it (I3). Repair: the close transition's release effects run
	// again, guarded (order.Machine.Reapply).
	KindClosedHolds Kind = "closed_order_holds"
	// KindClosedPaying: an order closed while its payment attempt was in flight, still
	// reading paying Config.StuckAfter after its close with no payment.cancel pending to
	// settle the attempt (I2: money the gateway may have taken is never looked for).
	// Repair: the close transition's effects run again (order.Machine.Reapply), which
	// writes the attempt's payment.cancel.
	KindClosedPaying Kind = "closed_order_paying"
	// KindPaidUnbacked: an order whose pay_status is paid without a payment that captured
	// money. Not repaired: an operator must find where the money is.
	KindPaidUnbacked Kind = "paid_without_payment"
	// KindStockMismatch: a SKU whose held or sold counter differs from the sum of its
	// reservations (I4). Repair: an audited correction sets the counters to the ledger's
	// figures, moving the difference to or from available.
	KindStockMismatch Kind = "stock_mismatch"
	// KindOverdueOrder: an open order past close_at (and past its next inspection) by more
	// than Config.OverdueTolerance (I5). Repair: the closer's claim-and-close pass.
	KindOverdueOrder Kind = "overdue_order"
	// KindOutboxDead: a dead letter (I7). Not repaired: an operator re-drives or discards it
	// (POST /v1/admin/outbox/dead/{id}/redrive, …/discard).
	KindOutboxDead Kind = "outbox_dead"
	// KindOutboxStuck: a pending message due more than Config.StuckAfter ago (the relay is
	// down or a key is blocked). Not repaired: an alert.
	KindOutboxStuck Kind = "outbox_stuck"

	// Kinds of a settlement statement (Reconciler.Statement).
	// KindStatementMissingOurs: money the gateway took with no payment of ours naming its
	// transaction, or gave back with no refund of ours naming it: inspect, then apply or
	// refund it at the gateway.
	KindStatementMissingOurs Kind = "statement_missing_ours"
	// KindStatementMissingTheirs: a capture or a succeeded refund of ours, within the
	// statement's period, that the statement does not list.
	KindStatementMissingTheirs Kind = "statement_missing_theirs"
	// KindStatementAmountMismatch: a transaction whose amount or currency differs between the
	// statement and our payment or refund.
	KindStatementAmountMismatch Kind = "statement_amount_mismatch"
	// KindStatementDuplicate: a transaction the statement lists more than once.
	KindStatementDuplicate Kind = "statement_duplicate"
	// KindStatementRefundUnconfirmed: a refund the statement lists (the provider gave the
	// money back) that we still read requested, or failed: its confirmation was lost.
	// Not repaired: the refund's query to the provider (the outbox retry) or an operator
	// settles it.
	KindStatementRefundUnconfirmed Kind = "statement_refund_unconfirmed"
)

// Finding is one disagreement. Its JSON is {"kind","order_id"?,"sku"?,"detail","repaired"}
// (the shape of `orderly reconcile --json`).
type Finding struct {
	Kind    Kind   `json:"kind"`
	OrderID string `json:"order_id,omitempty"`
	SKU     string `json:"sku,omitempty"`
	// Detail says what disagrees, with the figures (amounts in minor units).
	Detail string `json:"detail"`
	// Repaired is true when this run repaired it; false for a finding found only, for
	// one whose repair changed nothing (already repaired meanwhile) and for an operator task.
	Repaired bool `json:"repaired"`
	// Error is why its repair failed (a repair run only); the other findings were still
	// repaired.
	Error string `json:"error,omitempty"`
	// Target is what a repair acts on (a payment id, an outbox message id) when it is
	// neither the order nor the SKU.
	Target string `json:"-"`
}

// Report is the outcome of one run. Findings is never nil: all agree → [].
type Report struct {
	Findings []*Finding `json:"findings"`
	Scanned  int64      `json:"scanned"` // rows looked at
	Repaired int64      `json:"repaired"`
	// RepairErrors counts the repairs that failed (their findings carry the error).
	RepairErrors int64     `json:"repair_errors,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	FinishedAt   time.Time `json:"finished_at"`
}

// Counts returns the number of findings per kind.
func (r *Report) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, f := range r.Findings {
		out[f.Kind]++
	}
	return out
}

// Snapshot is one order and everything the per-order checks compare it with, read in one
// transaction: its payments, reservations, coupon, undelivered messages and the stock of
// its SKUs.
type Snapshot struct {
	Now          time.Time
	Order        *orderly.Order
	Open         *store.DueOrder // nil when the order is not open (no deadline)
	Payments     []*orderly.Payment
	Reservations []*orderly.Reservation
	Coupon       *orderly.Coupon      // nil without one
	Messages     []*orderly.Message   // undelivered, of the order's key and of its payments' keys
	Stock        []*store.StockLedger // of the order's SKUs
	Refunds      []*orderly.Refund    // oldest first
}

// Check is one kind of cross-check: a full scan, its per-order form and its repair.
type Check struct {
	Kind Kind
	// Scan walks its rows in keyset order, in batches of Config.BatchSize, each batch in its
	// own read transaction, and calls emit for every finding; it returns the rows it looked
	// at. since, when set, skips orders and payments created before it.
	Scan func(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error)
	// Order returns its findings about one order; nil when the check has no per-order form.
	Order func(r *Reconciler, s *Snapshot) []*Finding
	// Repair repairs one finding, idempotently (a repeat changes nothing and reports
	// false), and audits what it changed (Reconciler.audit) in the transaction of the
	// change. nil: the finding is an operator task.
	Repair func(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error)
}

// Actor is who asks for a repair: written to operator_actions.
type Actor struct {
	Operator string // "reconcile" for the job and the CLI; the Orderly-Operator header or "admin"
	TraceID  string
	// Fence, when set, is called first in every write transaction (a job's lease fence).
	Fence func(ctx context.Context, tx store.Tx) error
}
