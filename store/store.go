// Package store defines the storage seam of orderly: a Store that runs transactions and a
// Tx with one method per query, shaped (ctx, params) → (result, error). Implementations
// live in subpackages, one per SQL dialect family (see package sqlstore), and are checked
// by the conformance suite in package storetest.
//
// Every state change is a guarded UPDATE (… WHERE state = expected); methods that perform
// one report whether a row changed, so callers can tell a duplicate or a lost race from a
// success. Times are UTC and stored with millisecond precision. "Now" always comes from the
// database clock through Tx.Now (or from an injected clock in tests).
package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// Store runs transactions against one database.
type Store interface {
	// InTx runs fn in a read-write transaction and commits when fn returns nil; any error or
	// panic rolls back. Write transactions may be serialized (SQLite has one writer).
	InTx(ctx context.Context, fn func(tx Tx) error) error
	// Read runs fn in a read-only transaction; fn must not write. Reads may run concurrently
	// with each other and with a write transaction.
	Read(ctx context.Context, fn func(tx Tx) error) error
	// Dialect names the database: "sqlite", "postgres" or "mysql".
	Dialect() string
	// Close closes the database handles.
	Close() error
}

// Tx is one transaction. Methods return an *orderly.Error with code ENOTFOUND for a missing
// row and ECONFLICT for a unique-key violation; other errors are driver errors, wrapped.
type Tx interface {
	// Savepoint runs fn inside a savepoint of this transaction: when fn returns an error,
	// only fn's changes are rolled back and the error is returned; the transaction goes on.
	Savepoint(ctx context.Context, fn func() error) error
	// AfterCommit registers fn to run once after this transaction commits, in the order
	// registered, on the goroutine that called InTx, before InTx returns. It never runs on a
	// rollback, for an attempt that the store ran again (a deadlock, a serialization failure),
	// or when registered inside a Savepoint whose fn failed: counters and wake-ups that must
	// say what was committed, once, go here.
	AfterCommit(fn func())

	// Now returns the database's clock, truncated to the millisecond (never rounded up, so a
	// due check with it can never be early), never ahead of it and never a time read before
	// the caller's lock waits: it advances within a transaction (a later call after a wait
	// is later by the wait).
	Now(ctx context.Context) (time.Time, error)

	OrderInsert(ctx context.Context, params *OrderInsertParams) error
	// OrdersInsertMany is OrderInsert of many orders, in a few multi-row statements (a
	// batch of creates: order.Service's group commit).
	OrdersInsertMany(ctx context.Context, params []*OrderInsertParams) error
	// OrderGet returns an order; ENOTFOUND if there is none.
	OrderGet(ctx context.Context, id string) (*orderly.Order, error)
	// MetadataLock locks the row of object id of kind of and returns its metadata (nil for
	// none); ENOTFOUND if there is no such object.
	MetadataLock(ctx context.Context, of orderly.MetadataOf, id string) (orderly.Metadata, error)
	// MetadataSet replaces the metadata of object id of kind of (nil clears it).
	MetadataSet(ctx context.Context, of orderly.MetadataOf, id string, m orderly.Metadata) error
	// OrderGetByIdempotencyKey returns the order a user created with key and the hash of
	// that request; ENOTFOUND if there is none.
	OrderGetByIdempotencyKey(ctx context.Context, userID, key string) (*orderly.Order, string, error)
	// OrdersTransition is the one guarded state change of orders: it moves every order in
	// IDs that matches all guards from From to To, bumps version, writes one audit row per
	// changed order (with its pay_status before and after) and returns the ids that changed
	// (the others were changed concurrently).
	OrdersTransition(ctx context.Context, params *OrdersTransitionParams) ([]string, error)
	// OrderSetPayStatus changes pay_status (and optionally current_payment_id) without a
	// change of state, guarded like OrdersTransition, and writes its audit row (From = To =
	// State, the pay_status before and after, Event). It reports whether the row changed.
	OrderSetPayStatus(ctx context.Context, params *OrderSetPayStatusParams) (bool, error)
	// TransitionInsert writes one audit row that no other method writes (the creation row
	// of an order, event create); tr.ID is not set.
	TransitionInsert(ctx context.Context, tr *orderly.Transition) error
	// TransitionsInsertMany is TransitionInsert of many audit rows, in a few multi-row
	// statements.
	TransitionsInsertMany(ctx context.Context, trs []*orderly.Transition) error
	// OrdersDue claims up to Limit orders in a timed state (any flow) whose wake_at <= Now,
	// oldest wake_at first, locking them where the dialect can (FOR UPDATE SKIP LOCKED).
	OrdersDue(ctx context.Context, params *OrdersDueParams) ([]*DueOrder, error)
	// OrdersLock locks the rows of the orders in ids, in id order, until the transaction
	// ends (where the dialect has row locks; SQLite has one writer), and returns the ids
	// found. A transaction that will move several orders and then touch their stock locks
	// them all first (docs/flows/group-buy.md, lock order).
	OrdersLock(ctx context.Context, ids []string) ([]string, error)
	// OrdersPaymentsInFlight returns, by order id, the current payment attempt of the
	// orders in ids whose pay_status is paying (an attempt in flight) and whose attempt has
	// no pending payment.cancel message yet; other orders are absent.
	OrdersPaymentsInFlight(ctx context.Context, ids []string) (map[string]string, error)
	// OrdersOpen returns open orders (in a timed state, wake_at set): those in IDs when set, else up to Limit with
	// id > AfterID, by id (keyset pagination over every open order).
	OrdersOpen(ctx context.Context, params *OrdersOpenParams) ([]*DueOrder, error)
	// OrdersSetWakeAt moves the wake_at of open orders (used to back off payment inspection).
	OrdersSetWakeAt(ctx context.Context, ids []string, wakeAt time.Time) error
	// OrderNextWakeAt returns the earliest wake_at among open orders; ok=false if none.
	OrderNextWakeAt(ctx context.Context) (wakeAt time.Time, ok bool, err error)
	// OrdersOverdueCount counts open orders whose close_at and wake_at are both < before
	// (a paying order whose inspection is scheduled later is not overdue).
	OrdersOverdueCount(ctx context.Context, before time.Time) (int64, error)
	// OrderList returns up to Limit orders with id > AfterID, by id (keyset pagination).
	OrderList(ctx context.Context, params *ListParams) ([]*orderly.Order, error)
	// TransitionList returns an order's audit trail, oldest first.
	TransitionList(ctx context.Context, orderID string) ([]*orderly.Transition, error)

	// StockSet sets a SKU's available units, creating the SKU with held=sold=0.
	StockSet(ctx context.Context, sku string, available int64) (*orderly.Stock, error)
	// StockGet returns a SKU's stock; ENOTFOUND if there is none.
	StockGet(ctx context.Context, sku string) (*orderly.Stock, error)
	// StockList returns the stock of the SKUs after after ("" from the first), by SKU, at
	// most limit of them (0: all).
	StockList(ctx context.Context, after string, limit int) ([]*orderly.Stock, error)
	// StockAdjust adds delta (negative: removes) to a SKU's available units unless that
	// would take them below 0 or above most, and reports whether it did (false too for a
	// SKU without a stock row).
	StockAdjust(ctx context.Context, sku string, delta, most int64) (bool, error)
	// StockReserve moves Quantity units of SKU from available to held and records a held
	// reservation for the order; ok=false (nothing changed) when there are not enough.
	StockReserve(ctx context.Context, params *StockReserveParams) (ok bool, err error)
	// StockLockAvailable locks a SKU's stock row for the rest of the transaction (where
	// the dialect has row locks) and returns its available units; ok=false when the SKU
	// has no stock row. A batch of creates of one SKU reads what it can hand out with it,
	// then reserves it with StockReserveMany.
	StockLockAvailable(ctx context.Context, sku string) (available int64, ok bool, err error)
	// StockReserveMany is StockReserve of many orders of one SKU (every params' SKU is
	// sku): one guarded update of the total and the reservations in multi-row statements.
	// Errors: an internal error, nothing changed, when the total is not available (the
	// caller locked the row and counted with StockLockAvailable first).
	StockReserveMany(ctx context.Context, sku string, params []*StockReserveParams) error
	// ReservationsRelease moves the order's held reservations to released and their units
	// back to available; it returns the reservations it changed (none on a repeat call).
	ReservationsRelease(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error)
	// ReservationsReleaseMany is ReservationsRelease for many orders in one go (the close
	// transition of a batch of orders).
	ReservationsReleaseMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error)
	// ReservationsCommit moves the order's held reservations to committed and their units
	// from held to sold; it returns the reservations it changed.
	ReservationsCommit(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error)
	// ReservationsCommitMany is ReservationsCommit for many orders in one go (the pay
	// transition of a batch of orders).
	ReservationsCommitMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error)
	// ReservationList returns the reservations of one order ("" for all), by order and SKU.
	ReservationList(ctx context.Context, orderID string) ([]*orderly.Reservation, error)

	CouponInsert(ctx context.Context, c *orderly.Coupon) error
	// CouponGet returns a coupon; ENOTFOUND if there is none.
	CouponGet(ctx context.Context, id string) (*orderly.Coupon, error)
	// CouponList returns every coupon, by id.
	CouponList(ctx context.Context) ([]*orderly.Coupon, error)
	// CouponFreeze freezes an available, unexpired coupon of UserID in Currency for OrderID.
	CouponFreeze(ctx context.Context, params *CouponFreezeParams) (bool, error)
	// CouponRelease makes a coupon frozen by orderID available again (expired if its expiry
	// passed); it changes nothing when another order froze it.
	CouponRelease(ctx context.Context, id, orderID string, now time.Time) (bool, error)
	// CouponsRelease is CouponRelease for many (coupon, order) pairs; it returns the number
	// of coupons released.
	CouponsRelease(ctx context.Context, refs []orderly.CouponRef, now time.Time) (int64, error)
	// CouponUse marks a coupon frozen by orderID used.
	CouponUse(ctx context.Context, id, orderID string) (bool, error)

	// PaymentInsert writes a payment (an attempt, or an extra capture with DuplicateOf set)
	// and numbers it: p.Attempt becomes one more than the order's last. ECONFLICT when the id
	// or the channel_txn_id is taken.
	PaymentInsert(ctx context.Context, p *orderly.Payment) error
	// PaymentGet returns a payment; ENOTFOUND if there is none.
	PaymentGet(ctx context.Context, id string) (*orderly.Payment, error)
	// PaymentGetByChannelTxnID returns the payment that recorded a gateway transaction id;
	// ENOTFOUND if there is none.
	PaymentGetByChannelTxnID(ctx context.Context, channelTxnID string) (*orderly.Payment, error)
	// PaymentList returns the payments of one order ("" for all), oldest first.
	PaymentList(ctx context.Context, orderID string) ([]*orderly.Payment, error)
	// PaymentSetState is the guarded state change of a payment.
	PaymentSetState(ctx context.Context, params *PaymentSetStateParams) (bool, error)
	// PaymentSetHandoff records the provider's object id of a payment and the handoff for
	// the buyer's client (nil: none), as the provider answered the create. PaymentSetState
	// drops the handoff (the attempt has an outcome); the provider's id stays.
	PaymentSetHandoff(ctx context.Context, id, providerRef string, next *orderly.NextAction) error

	// CallbackRefusalInsert records a refused payment callback (r.ID is not set). Strings
	// longer than their column are truncated, on a UTF-8 boundary (the body to 64 KiB).
	CallbackRefusalInsert(ctx context.Context, r *orderly.CallbackRefusal) error
	// CallbackRefusalList returns the refused callbacks that named paymentID, oldest first,
	// at most limit.
	CallbackRefusalList(ctx context.Context, paymentID string, limit int) ([]*orderly.CallbackRefusal, error)

	// OutboxInsert writes messages in the caller's transaction (the transactional outbox), in
	// list order (ids increase), each with a new UUID as MessageID. The relay delivers the
	// messages of one key in id order, so the transactions that write messages of one key
	// must be serialized: an event's OutboxSequences does it; any other message must be
	// written by a transaction that has changed (and so locked) the row of the entity its key
	// names, before the insert. It refuses (an error, nothing written) a message of an
	// order event topic (orderly.IsOrderEvent) whose Sequence is below 1.
	OutboxInsert(ctx context.Context, msgs []*OutboxInsertParams) error
	// OutboxSequences reserves the next event sequence of each key, in list order (a key
	// listed k times gets k consecutive numbers); a key's first event gets 1. It locks the
	// keys' counters until the transaction ends, so the events of one key get their numbers,
	// and their ids, in commit order. Pass the numbers as OutboxInsertParams.Sequence.
	OutboxSequences(ctx context.Context, keys []string) ([]int64, error)
	// OutboxClaim leases up to Limit pending messages whose next_attempt_at <= Now: it sets
	// their next_attempt_at to LeaseUntil and increments attempts, so a crashed relay's
	// messages become due again when the lease ends. It never returns a message while an
	// earlier message (lower id) of its key is pending and not returned with it (waiting for
	// a retry, claimed by another relay, or left out by Limit); the messages of one key that
	// it returns are consecutive, and the relay delivers them in id order. Dead messages do
	// not hold their key. Messages come back ordered by id.
	OutboxClaim(ctx context.Context, params *OutboxClaimParams) ([]*orderly.Message, error)
	// OutboxUnclaim puts back claimed messages that were not attempted: attempts is
	// decremented, last_error set to reason, and they are due at now. Only pending messages
	// change.
	OutboxUnclaim(ctx context.Context, ids []int64, now time.Time, reason string) error
	// OutboxMarkDelivered marks pending messages delivered.
	OutboxMarkDelivered(ctx context.Context, ids []int64, now time.Time) error
	// OutboxMarkFailed records a failed attempt: pending again at NextAttemptAt, or dead.
	OutboxMarkFailed(ctx context.Context, params *OutboxMarkFailedParams) error
	// OutboxList returns up to Limit messages in a state, oldest first.
	OutboxList(ctx context.Context, state string, limit int) ([]*orderly.Message, error)
	// OutboxEvents returns up to Limit events (messages with a Sequence, in any state) by id:
	// those with an id above AfterID, written at or before Before, of Topic and Key where
	// they are not "".
	OutboxEvents(ctx context.Context, params *OutboxEventsParams) ([]*orderly.Message, error)
	// OutboxLastID returns the highest message id in the outbox, 0 when it is empty.
	OutboxLastID(ctx context.Context) (int64, error)
	// OutboxCounts returns the number of messages per state.
	OutboxCounts(ctx context.Context) (map[string]int64, error)
	// OutboxRedrive makes a dead message pending again with attempts=0, due at now.
	OutboxRedrive(ctx context.Context, id int64, now time.Time) (bool, error)
	// OutboxDeleteDelivered deletes up to limit messages delivered before the given time.
	OutboxDeleteDelivered(ctx context.Context, before time.Time, limit int) (int64, error)

	// LeaseAcquire takes or renews lease Name for Owner until Now+TTL. It succeeds when the
	// lease is free, expired or already Owner's; a change of owner increments the fencing
	// token. ok=false (and the current holder's lease) when another owner holds it unexpired.
	LeaseAcquire(ctx context.Context, params *LeaseParams) (lease *Lease, ok bool, err error)
	// LeaseCheck is the fence of a job's write transaction: it locks the lease row (where
	// the dialect has row locks, so no takeover can commit before this transaction ends)
	// and reports whether owner still holds it with token, unexpired at now.
	LeaseCheck(ctx context.Context, name, owner string, token int64, now time.Time) (bool, error)
	// LeaseRelease ends owner's lease early (at shutdown), when token is still current.
	LeaseRelease(ctx context.Context, name, owner string, token int64) error
	// JobRunInsert records one run of a periodic job.
	JobRunInsert(ctx context.Context, run *JobRun) error
	// JobRunList returns up to limit runs of job ("" for all jobs), newest first.
	JobRunList(ctx context.Context, job string, limit int) ([]*JobRun, error)

	RefundTx
	GroupTx
	TripTx
	WalletTx
	SagaTx
	AdminTx
	WebhookTx
	KeyTx
	IdempotencyTx
	TelemetryTx
	ChannelEventTx
	OverviewTx
}

// OutboxEventsParams is the input of Tx.OutboxEvents.
type OutboxEventsParams struct {
	AfterID int64
	Before  time.Time
	Topic   string
	Key     string
	Limit   int
}

// LeaseParams is the input of Tx.LeaseAcquire.
type LeaseParams struct {
	Name  string
	Owner string
	Now   time.Time
	TTL   time.Duration
}

// Lease is time-bound ownership of a periodic job by one instance.
type Lease struct {
	Name      string
	Owner     string
	Token     int64 // fencing token: writes made under an older token are refused
	ExpiresAt time.Time
}

// JobRun is one run of a periodic job: when, by which instance under which lease token,
// how many rows it looked at and changed, and its error ("" when it succeeded).
type JobRun struct {
	ID         int64     `json:"id"`
	Job        string    `json:"job"`
	Instance   string    `json:"instance"`
	Token      int64     `json:"token"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Scanned    int64     `json:"scanned"`
	Changed    int64     `json:"changed"`
	Error      string    `json:"error,omitempty"`
}

// OrderInsertParams is the input of Tx.OrderInsert.
type OrderInsertParams struct {
	Order          *orderly.Order
	IdempotencyKey string // "" for none
	RequestHash    string // hash of the request that created the order, for EIDEMPOTENCY
	// NoDeadline says that the order's initial state is not a timed state of its flow
	// (orderly.Flow.TimedIn): wake_at stays NULL and no closer looks at the order. By
	// default wake_at = close_at.
	NoDeadline bool
}

// OrdersTransitionParams is the input of Tx.OrdersTransition. Zero-valued optional guards
// and settings are not applied.
type OrdersTransitionParams struct {
	IDs   []string
	From  orderly.State
	To    orderly.State
	Event orderly.Event
	// PayStatusIn, when set, is a guard: only orders whose pay_status is in the list change.
	PayStatusIn []orderly.PayStatus
	// CloseAtBy, when set, is a guard: only orders with close_at <= CloseAtBy change. The
	// close path passes the database's now here, which is what makes I1 hold.
	CloseAtBy *time.Time
	Now       time.Time // written to the audit row, closed_at and paid_at
	// SetPayStatus, when set, is the new pay_status.
	SetPayStatus orderly.PayStatus
	// CloseReason, when set, sets close_reason and closed_at = Now.
	CloseReason orderly.CloseReason
	// SetPaidAt sets paid_at = Now.
	SetPaidAt bool
	// Timed says that To is a timed state of the order's flow: wake_at becomes close_at
	// (the closer looks at the order at its deadline); otherwise wake_at becomes NULL.
	Timed bool
	Cause string
	// Causes, when set, is the cause of each order's audit row by order id (Cause for an
	// order it does not name): a batch of orders each paid by its own payment.
	Causes  map[string]string
	Actor   string
	TraceID string
	// Metadata is set by OrdersTransition: the metadata of each changed order that has any,
	// read with its lock, so that the transition's events carry it without another read.
	Metadata map[string]orderly.Metadata
}

// OrderSetPayStatusParams is the input of Tx.OrderSetPayStatus.
type OrderSetPayStatusParams struct {
	ID          string
	State       orderly.State       // guard: the order's state
	From        []orderly.PayStatus // guard: the order's pay_status is one of these
	To          orderly.PayStatus
	IfPaymentID string // guard, when set: current_payment_id = IfPaymentID
	// IfCurrentPayment makes IfPaymentID a guard even when it is empty: current_payment_id
	// must be IfPaymentID, or unset when IfPaymentID is "". A new attempt replaces only the
	// attempt its caller read, so of two attempts started at once for one order exactly one
	// becomes current (payment.Service.StartPayment).
	IfCurrentPayment bool
	// SetPaymentID, when set, becomes current_payment_id.
	SetPaymentID string
	// The audit row: Event (EventPaymentStarted, EventPaymentFailed, …), Cause, Actor,
	// TraceID and the time Now.
	Event   orderly.Event
	Cause   string
	Actor   string
	TraceID string
	Now     time.Time
}

// OrdersDueParams is the input of Tx.OrdersDue.
type OrdersDueParams struct {
	Now   time.Time
	Limit int
	// IDs, when set, restricts the claim to these orders (ids from a delay queue).
	IDs []string
}

// OrdersOpenParams is the input of Tx.OrdersOpen.
type OrdersOpenParams struct {
	IDs     []string
	AfterID string
	Limit   int
}

// DueOrder is an open order, as the close path sees it.
type DueOrder struct {
	ID               string
	Flow             string
	State            orderly.State // a timed state of Flow
	PayStatus        orderly.PayStatus
	CurrentPaymentID string
	CouponID         string
	CloseAt          time.Time
	WakeAt           time.Time
}

// ListParams is a keyset page request.
type ListParams struct {
	AfterID string
	Limit   int
}

// StockReserveParams is the input of Tx.StockReserve.
type StockReserveParams struct {
	OrderID  string
	SKU      string
	Quantity int64
	Now      time.Time
}

// CouponFreezeParams is the input of Tx.CouponFreeze.
type CouponFreezeParams struct {
	ID       string
	UserID   string
	OrderID  string
	Currency string
	Now      time.Time // the coupon must not be expired at Now
}

// PaymentSetStateParams is the input of Tx.PaymentSetState; optional fields left zero are
// not written.
type PaymentSetStateParams struct {
	ID           string
	From         []orderly.PaymentState // guard
	To           orderly.PaymentState
	ChannelTxnID string
	FailReason   string
	SucceededAt  *time.Time
	RefundedAt   *time.Time
}

// OutboxInsertParams is one message to write.
type OutboxInsertParams struct {
	Topic   string
	Key     string
	Payload []byte // JSON
	// Sequence is an event's number from OutboxSequences, reserved in the same transaction;
	// 0 for a message that is not an event.
	Sequence int64
	Now      time.Time
	// TraceParent is the W3C traceparent the message carries (orderly.Message.TraceParent);
	// "" means the span of the inserting context, if any (telemetry.TraceParent).
	TraceParent string
	// Group is the message's fairness group (orderly.Message.Group); "" for none.
	Group string
}

// OutboxClaimParams is the input of Tx.OutboxClaim.
type OutboxClaimParams struct {
	Now        time.Time
	LeaseUntil time.Time
	Limit      int
	// Topics, when not empty, restricts the claim to messages of these topics, and
	// ExcludeTopics leaves out the messages of those: a relay's claim lane (outbox.Lane).
	// The key order holds across lanes: a message is still not claimed while an earlier
	// message of its key, of any topic, is pending.
	Topics, ExcludeTopics []string
	// GroupLimit, when positive, caps the keys of one message group (Message.Group, not "")
	// that a claim with Topics takes, counting Busy[group] keys the caller still has in
	// flight: a group at its limit is skipped, and the claim reads on past it (a bounded
	// number of reads) for the messages of other groups. The key order still holds.
	GroupLimit int
	Busy       map[string]int
}

// OutboxMarkFailedParams is the input of Tx.OutboxMarkFailed.
type OutboxMarkFailedParams struct {
	ID            int64
	LastError     string
	Dead          bool
	NextAttemptAt time.Time // when not Dead
}
