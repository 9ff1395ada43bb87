// Package order creates orders, moves them through their flow and releases what a closed
// order held. It implements orderly.OrderService and orderly.CatalogService on a store.Store.
package order

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Limits on order input. They bound the work and the size of one order.
const (
	MaxItems              = 100
	MaxQuantity           = 1_000_000
	MaxIDLength           = 128
	MaxPaymentTimeout     = 7 * 24 * time.Hour // cap of payment_timeout_seconds and of the configured default
	DefaultPaymentTimeout = 30 * time.Minute
)

// currencyRule is the error text of an invalid currency (orderly.ValidCurrency).
const currencyRule = "must be the ISO 4217 code of a currency of money, such as USD (not XXX, XTS or a metal)"

// MaxStock is the largest number of units a SKU may hold (available, held and sold
// together stay far from int64 overflow): 10^12.
const MaxStock = 1_000_000_000_000

// ValidID reports whether s can name a user, SKU, coupon or channel: 1–MaxIDLength bytes
// of valid UTF-8 without control characters, so that it reads back as written through
// JSON and URLs.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLength || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// idRule is the error text of an invalid id.
const idRule = "must be 1–128 bytes of UTF-8 without control characters"

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	Store store.Store
	// Machine applies transitions and their effects; nil → DefaultMachine(). The
	// composition root (package engine) builds one and gives it to every service.
	Machine *Machine
	// DefaultPaymentTimeout is the buyer's time to pay when an order names none; 30 min.
	DefaultPaymentTimeout time.Duration
	// GracePeriod is added to the payment deadline to get close_at, for callbacks in
	// flight; 0 by default.
	GracePeriod time.Duration
	// Signals is told of each order committed (its close_at: the timer) and of outbox
	// messages written; nil drops them.
	Signals orderly.Signals
	// Payments cancels an attempt in flight at the gateway before a buyer cancel (package
	// payment implements it). nil: the attempt is marked failed without asking a gateway,
	// and a success that arrives later is refunded (I2).
	Payments PaymentCanceller
	Logger   *slog.Logger
	// CreateBatch is the most concurrent creates of one-line orders of one SKU that
	// CreateOrder joins into one transaction, each in its own savepoint (batch.go);
	// DefaultCreateBatch (32); 1 runs each create in its own transaction.
	CreateBatch int
	// CreateQueue is the most creates of one-line orders of one SKU that wait in this
	// process for their transaction; past it CreateOrder answers EUNAVAILABLE at once
	// (503 with Retry-After over HTTP), so that the client's retry can go to another
	// instance. DefaultCreateQueue (512).
	CreateQueue int
	// Metrics receives orderly_create_queue_waiting; nil → a set of its own.
	Metrics *telemetry.Metrics
}

// PaymentCanceller stops an order's payment attempt at the gateway (package payment
// implements it; see payment.Service.CancelPayment).
type PaymentCanceller interface {
	// CancelPayment cancels attempt paymentID of order orderID at the gateway.
	// GatewaySucceeded: it was captured first, and has been applied; GatewayFailed: it can
	// no longer be captured (the caller marks it failed); GatewayUnknown, with or without an
	// error: the gateway could not tell.
	CancelPayment(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error)
}

// Service implements orderly.OrderService and orderly.CatalogService.
type Service struct {
	cfg   Config
	batch *createBatcher
}

var (
	_ orderly.OrderService   = (*Service)(nil)
	_ orderly.CatalogService = (*Service)(nil)
)

// NewService returns a Service; it returns an error when cfg has no Store, a negative
// duration or a DefaultPaymentTimeout over MaxPaymentTimeout (the cap of per-order values).
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("order: Config.Store is required")
	}
	if cfg.DefaultPaymentTimeout < 0 || cfg.GracePeriod < 0 || cfg.CreateBatch < 0 || cfg.CreateQueue < 0 {
		return nil, errors.New("order: durations, CreateBatch and CreateQueue must not be negative")
	}
	if cfg.DefaultPaymentTimeout > MaxPaymentTimeout {
		return nil, fmt.Errorf("order: DefaultPaymentTimeout %s is over MaxPaymentTimeout %s", cfg.DefaultPaymentTimeout, MaxPaymentTimeout)
	}
	if cfg.Machine == nil {
		cfg.Machine = DefaultMachine()
	}
	cfg.DefaultPaymentTimeout = cmp.Or(cfg.DefaultPaymentTimeout, DefaultPaymentTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	cfg.CreateBatch = cmp.Or(cfg.CreateBatch, DefaultCreateBatch)
	cfg.CreateQueue = cmp.Or(cfg.CreateQueue, DefaultCreateQueue)
	s := &Service{cfg: cfg}
	s.batch = &createBatcher{max: cfg.CreateBatch, queue: cfg.CreateQueue, run: s.createBatch, skus: map[string]*skuQueue{},
		waiting: telemetry.OrDefault(cfg.Metrics).CreateQueueWaiting}
	return s, nil
}

// NewID returns a new time-ordered unique id (UUIDv7).
func NewID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

// validate checks p and returns the items' total in minor units. Errors: EINVALID.
func validate(p *orderly.CreateOrderParams) (int64, error) {
	switch {
	case !ValidID(p.UserID):
		return 0, orderly.Errorf(orderly.EINVALID, "user_id %s", idRule)
	case !orderly.ValidCurrency(p.Currency):
		return 0, orderly.Errorf(orderly.EINVALID, "currency %s", currencyRule)
	case len(p.Items) == 0 || len(p.Items) > MaxItems:
		return 0, orderly.Errorf(orderly.EINVALID, "items must hold 1–%d lines", MaxItems)
	case p.PaymentTimeoutSeconds < 0 || p.PaymentTimeoutSeconds > int64(MaxPaymentTimeout/time.Second):
		return 0, orderly.Errorf(orderly.EINVALID, "payment_timeout_seconds must be 0 (default) to %d", int64(MaxPaymentTimeout/time.Second))
	case p.CouponID != "" && !ValidID(p.CouponID):
		return 0, orderly.Errorf(orderly.EINVALID, "coupon_id %s", idRule)
	case p.PaymentMethod != "" && p.PaymentMethod != orderly.PaymentMethodWallet:
		return 0, orderly.Errorf(orderly.EINVALID, "payment_method must be absent or %q", orderly.PaymentMethodWallet)
	}
	if err := p.Metadata.Validate(); err != nil {
		return 0, err
	}
	var total int64
	seen := make(map[string]bool, len(p.Items))
	for i, it := range p.Items {
		switch {
		case !ValidID(it.SKU):
			return 0, orderly.Errorf(orderly.EINVALID, "items[%d].sku %s", i, idRule)
		case seen[it.SKU]:
			return 0, orderly.Errorf(orderly.EINVALID, "items[%d].sku %q appears twice; merge the lines", i, it.SKU)
		case it.Quantity <= 0 || it.Quantity > MaxQuantity:
			return 0, orderly.Errorf(orderly.EINVALID, "items[%d].quantity must be 1–%d", i, MaxQuantity)
		case it.UnitPrice < 0 || it.UnitPrice > orderly.MaxAmount:
			return 0, orderly.Errorf(orderly.EINVALID, "items[%d].unit_price must be 0 to %d minor units", i, int64(orderly.MaxAmount))
		case it.UnitPrice > 0 && it.Quantity > (orderly.MaxAmount-total)/it.UnitPrice: // no product is formed before this check
			return 0, orderly.Errorf(orderly.EINVALID, "items[%d]: the items' total (quantity × unit_price) must be at most %d minor units",
				i, int64(orderly.MaxAmount))
		}
		seen[it.SKU] = true
		total += it.Quantity * it.UnitPrice
	}
	if total < 1 {
		return 0, errZeroAmount
	}
	return total, nil
}

// errZeroAmount refuses an order of amount 0 (free items, or a coupon equal to the total):
// it could only be paid by a callback for 0, so it would wait for its close. Shops that
// give an order away create no order for it.
var errZeroAmount = orderly.Errorf(orderly.EINVALID, "amount after coupon must be at least 1 minor unit")

// requestHash fingerprints the parts of a create request that define the order.
func requestHash(p *orderly.CreateOrderParams) string {
	b, _ := json.Marshal(p) // json tags exclude the idempotency key, actor and trace id
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CreateOrder implements orderly.OrderService. Concurrent creates of one-line orders of
// the same SKU share a transaction (Config.CreateBatch, batch.go); when Config.CreateQueue
// creates of the SKU already wait, it returns EUNAVAILABLE at once without changing
// anything.
func (s *Service) CreateOrder(ctx context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	if flow, err := s.cfg.Machine.Flow(cmp.Or(p.Flow, orderly.FlowStandard)); err != nil {
		return nil, false, err
	} else if flow.Managed {
		return nil, false, orderly.Errorf(orderly.EINVALID, "orders of flow %s are created by their own routes (%s)", flow.Name,
			cmp.Or(flow.CreatedBy, "the flow's own package"))
	}
	switch p.PaymentMethod {
	case "":
	case orderly.PaymentMethodWallet:
		// The wallet checkout is a saga of its own (package checkout), which the engine
		// puts in front of this service.
		return nil, false, orderly.Errorf(orderly.EINVALID, "payment_method %q is not served here: no wallet checkout is configured", p.PaymentMethod)
	default:
		return nil, false, orderly.Errorf(orderly.EINVALID, "payment_method: the only one is %q (a wallet checkout, where the server has one); omit it to pay through a gateway (POST /v1/orders/{id}/payments), got %q",
			orderly.PaymentMethodWallet, p.PaymentMethod)
	}
	var (
		o       *orderly.Order
		created bool
		err     error
	)
	// Two attempts: a concurrent create with the same idempotency key can win the unique
	// index between our lookup and our insert; the second attempt then finds its order.
	for attempt := 0; attempt < 2; attempt++ {
		if len(p.Items) == 1 && ValidID(p.Items[0].SKU) {
			o, created, err = s.batch.do(ctx, p.Items[0].SKU, p)
		} else {
			err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
				var err error
				o, created, err = s.CreateInTx(ctx, tx, p, nil)
				return err
			})
		}
		if p.IdempotencyKey == "" || orderly.ErrorCode(err) != orderly.ECONFLICT {
			break
		}
	}
	if err != nil {
		return nil, false, err
	}
	if created {
		s.Created(ctx, o)
	}
	return o, created, nil
}

// CreateOptions are the options of CreateInTx; nil means none.
type CreateOptions struct {
	// Admit, when set, is called after the idempotency lookup (not on a replay) with the
	// database's now, before anything is written. Its error refuses the order and is
	// returned; the time it returns, when not zero, caps the payment deadline: expires_at =
	// min(now + payment timeout, cap) (a group-buy member pays before its group's deadline).
	Admit func(now time.Time) (deadlineCap time.Time, err error)
	// RequestTag is added to the request's idempotency fingerprint: the same key and body
	// for another group is another request (EIDEMPOTENCY).
	RequestTag string
	// Inserted, when set, is called with the order once it and its creation audit row are
	// written, before any stock is reserved; its error refuses the order and is returned.
	// A domain package writes its own rows there (a group member), so that the SKUs' stock
	// rows, which every create, payment and close of those SKUs updates, are taken last
	// and held only until the commit.
	Inserted func(o *orderly.Order) error
	// ID, when set, is the new order's id (a valid UUID chosen by the caller: the wallet
	// checkout gives its order its saga's id); a new UUIDv7 otherwise.
	ID string
	// NoResources writes the order and its creation audit row only: the caller reserves
	// the stock and freezes the coupon itself, later (the wallet checkout's own saga steps,
	// package checkout). The amount still takes the coupon off.
	NoResources bool
	// Now, when not zero, is the database clock the caller read in tx (tx.Now), used
	// instead of reading it again: a batch of creates reads it once for its members.
	Now time.Time
}

// CreateInTx is the body of CreateOrder in the caller's transaction tx, so that a domain
// package (groupbuy) creates an order together with its own rows, under its own locks. It
// validates p, looks up the idempotency key (a replay returns the first order and
// created=false), calls opts.Admit, then writes the order and its creation audit row,
// calls opts.Inserted, reserves stock (in SKU order) and freezes the coupon. Errors as CreateOrder; on error
// the caller must roll tx back. After tx commits, call Created for an order it created.
func (s *Service) CreateInTx(ctx context.Context, tx store.Tx, p *orderly.CreateOrderParams, opts *CreateOptions) (*orderly.Order, bool, error) {
	if opts == nil {
		opts = &CreateOptions{}
	}
	n, err := s.newOrder(ctx, tx, p, opts)
	if err != nil {
		return nil, false, err
	} else if n.replay != nil {
		return n.replay, false, nil
	}
	o, timed := n.order, n.timed
	if err := s.cfg.Machine.Insert(ctx, tx, &store.OrderInsertParams{Order: o, IdempotencyKey: p.IdempotencyKey, RequestHash: n.hash, NoDeadline: !timed}); err != nil {
		return nil, false, err
	}
	if err := tx.TransitionInsert(ctx, n.audit(ctx, p)); err != nil {
		return nil, false, err
	}
	if err := keepTrace(ctx, tx, o.ID); err != nil {
		return nil, false, err
	}
	if opts.Inserted != nil {
		if err := opts.Inserted(o); err != nil {
			return nil, false, err
		}
	}
	if opts.NoResources {
		return o, true, nil
	}
	if err := Reserve(ctx, tx, o, n.now); err != nil {
		return nil, false, err
	}
	if err := FreezeCoupon(ctx, tx, o, n.now); err != nil {
		return nil, false, err
	}
	return o, true, nil
}

// keepTrace leaves a traced request's trace context with its new order: the order's
// background transitions (its close) continue that trace (docs/operations/metrics-and-dashboards.md).
func keepTrace(ctx context.Context, tx store.Tx, orderID string) error {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	return tx.OrderTraceInsert(ctx, orderID, telemetry.TraceParent(ctx))
}

// errKeyReused is EIDEMPOTENCY for an idempotency key that named another request.
func errKeyReused(key string) error {
	return orderly.Errorf(orderly.EIDEMPOTENCY, "Idempotency-Key %q was used for a different request", key)
}

// errOutOfStock is EOUTOFSTOCK for quantity units of sku.
func errOutOfStock(sku string, quantity int64) error {
	return orderly.Errorf(orderly.EOUTOFSTOCK, "not enough available stock of sku %s for %d units", sku, quantity)
}

// newOrder is what CreateInTx decides before it writes anything: the order as it will be
// written, or the order a replayed idempotency key created.
type newOrder struct {
	order  *orderly.Order // nil on a replay
	replay *orderly.Order // the first order of the key, or nil
	hash   string         // the request's idempotency fingerprint
	now    time.Time      // the database clock of the transaction
	timed  bool           // the initial state has a deadline (wake_at set)
}

// audit is the order's creation audit row.
func (n *newOrder) audit(ctx context.Context, p *orderly.CreateOrderParams) *orderly.Transition {
	o := n.order
	return &orderly.Transition{OrderID: o.ID, To: o.State, Event: orderly.EventCreate,
		PayStatusTo: o.PayStatus, Actor: cmp.Or(p.Actor, "buyer"), At: n.now, TraceID: cmp.Or(p.TraceID, telemetry.TraceID(ctx))}
}

// newOrder validates p, looks up its idempotency key (a replay: newOrder.replay), reads
// the database clock (unless opts.Now), calls opts.Admit, reads the coupon and builds the
// order. It writes nothing. Errors as CreateOrder.
func (s *Service) newOrder(ctx context.Context, tx store.Tx, p *orderly.CreateOrderParams, opts *CreateOptions) (*newOrder, error) {
	total, err := validate(p)
	if err != nil {
		return nil, err
	}
	flow, err := s.cfg.Machine.Flow(cmp.Or(p.Flow, orderly.FlowStandard))
	if err != nil {
		return nil, err
	}
	if len(p.IdempotencyKey) > 255 {
		return nil, orderly.Errorf(orderly.EINVALID, "Idempotency-Key is longer than 255 characters")
	}
	hash := requestHash(p)
	if opts.RequestTag != "" {
		sum := sha256.Sum256([]byte(hash + "\x00" + opts.RequestTag))
		hash = hex.EncodeToString(sum[:])
	}
	if p.IdempotencyKey != "" {
		prev, prevHash, err := tx.OrderGetByIdempotencyKey(ctx, p.UserID, p.IdempotencyKey)
		if err == nil {
			if prevHash != hash {
				return nil, errKeyReused(p.IdempotencyKey)
			}
			return &newOrder{replay: prev, hash: hash}, nil
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return nil, err
		}
	}
	now := opts.Now
	if now.IsZero() {
		if now, err = tx.Now(ctx); err != nil {
			return nil, err
		}
	}
	timeout := s.cfg.DefaultPaymentTimeout
	if p.PaymentTimeoutSeconds > 0 {
		timeout = time.Duration(p.PaymentTimeoutSeconds) * time.Second
	}
	expiresAt := now.Add(timeout)
	if opts.Admit != nil {
		deadlineCap, err := opts.Admit(now)
		if err != nil {
			return nil, err
		}
		if !deadlineCap.IsZero() && deadlineCap.Before(expiresAt) {
			expiresAt = deadlineCap
		}
	}
	id := opts.ID
	if id == "" {
		if id, err = NewID(); err != nil {
			return nil, err
		}
	}
	amount := total
	if p.CouponID != "" {
		c, err := tx.CouponGet(ctx, p.CouponID)
		if orderly.ErrorCode(err) == orderly.ENOTFOUND {
			return nil, orderly.Errorf(orderly.ECOUPONUNAVAIL, "coupon %s does not exist", p.CouponID)
		} else if err != nil {
			return nil, err
		}
		if c.AmountOff > total {
			return nil, orderly.Errorf(orderly.ECOUPONUNAVAIL, "coupon %s takes %d off an order of %d; it must be less than the total", c.ID, c.AmountOff, total)
		}
		amount -= c.AmountOff
	}
	if amount < 1 {
		return nil, errZeroAmount
	}
	o := &orderly.Order{
		ID: id, UserID: p.UserID, Flow: flow.Name, State: flow.Initial, PayStatus: orderly.PayUnpaid,
		Items: p.Items, Amount: amount, Currency: p.Currency, CouponID: p.CouponID,
		CreatedAt: now, ExpiresAt: expiresAt, CloseAt: expiresAt.Add(s.cfg.GracePeriod), Version: 1,
		Metadata: p.Metadata,
	}
	_, timed := flow.TimedIn(o.State)
	return &newOrder{order: o, hash: hash, now: now, timed: timed}, nil
}

// Reserve reserves the stock of o's items in tx, in SKU order: every transaction that
// locks several stock rows takes them in the same order (release and commit do too), so
// they cannot deadlock. Errors: EOUTOFSTOCK naming the first SKU short of units; the
// caller rolls back (or back to its savepoint).
func Reserve(ctx context.Context, tx store.Tx, o *orderly.Order, now time.Time) error {
	id := o.ID
	for _, it := range slices.SortedFunc(slices.Values(o.Items), func(a, b orderly.Item) int { return strings.Compare(a.SKU, b.SKU) }) {
		ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: it.SKU, Quantity: it.Quantity, Now: now})
		if err != nil {
			return err
		} else if !ok {
			return errOutOfStock(it.SKU, it.Quantity)
		}
	}
	return nil
}

// FreezeCoupon freezes o's coupon, if it names one, for o in tx. Errors: ECOUPONUNAVAIL
// when the coupon is used, frozen, expired or someone else's.
func FreezeCoupon(ctx context.Context, tx store.Tx, o *orderly.Order, now time.Time) error {
	if o.CouponID == "" {
		return nil
	}
	ok, err := tx.CouponFreeze(ctx, &store.CouponFreezeParams{ID: o.CouponID, UserID: o.UserID, OrderID: o.ID, Currency: o.Currency, Now: now})
	if err != nil {
		return err
	} else if !ok {
		return orderly.Errorf(orderly.ECOUPONUNAVAIL, "coupon %s is not available to user %s in %s (used, frozen, expired or someone else's)", o.CouponID, o.UserID, o.Currency)
	}
	return nil
}

// Created tells the timer (Config.Signals) about an order that a committed transaction
// created through CreateInTx.
func (s *Service) Created(ctx context.Context, o *orderly.Order) {
	s.cfg.Signals.OrderCreated(ctx, o.ID, o.CloseAt)
}

// Machine returns the machine that applies the service's transitions.
func (s *Service) Machine() *Machine { return s.cfg.Machine }

// Order implements orderly.OrderService.
func (s *Service) Order(ctx context.Context, id string) (o *orderly.Order, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		o, err = tx.OrderGet(ctx, id)
		return err
	})
	return o, err
}

// OrderHistory implements orderly.OrderService.
func (s *Service) OrderHistory(ctx context.Context, id string) (trail []*orderly.Transition, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.OrderGet(ctx, id); err != nil {
			return err
		}
		trail, err = tx.TransitionList(ctx, id)
		return err
	})
	return trail, err
}

// load reads an order about to change, its flow and the database's now.
func (s *Service) load(ctx context.Context, tx store.Tx, id string) (*orderly.Order, *orderly.Flow, time.Time, error) {
	cur, err := tx.OrderGet(ctx, id)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	flow, err := s.cfg.Machine.Flow(cur.Flow)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now, err := tx.Now(ctx)
	return cur, flow, now, err
}

// cancelRounds bounds how often CancelOrder starts again because a new payment attempt
// started while it cancelled the previous one at the gateway.
const cancelRounds = 3

// errAttemptChanged says that the order changed since it was read (most likely a new
// attempt started after the previous one was cancelled at the gateway): look again.
var errAttemptChanged = errors.New("the order's payment attempt changed")

// CancelOrder implements orderly.OrderService. The buyer may cancel while a payment attempt
// is in flight: the attempt is cancelled at the gateway first (s.cfg.Payments, outside any
// transaction), as payment inspection does at a timeout. Captured → the payment is applied
// and the cancel refused (EILLEGAL, the order is paid); cancelled → the attempt is marked
// failed (reason "cancelled by buyer") and the order closed with pay_status failed, its
// reservations and coupon released (the close's effects), in one transaction; the gateway cannot tell → ECONFLICT,
// nothing changes, the buyer may retry.
func (s *Service) CancelOrder(ctx context.Context, id, actor, traceID string) (*orderly.Order, error) {
	for round := 1; ; round++ {
		cur, err := s.Order(ctx, id)
		if err != nil {
			return nil, err
		}
		settled := "" // the attempt the gateway says can no longer be captured
		if cur.State == orderly.StatePendingPayment && cur.PayStatus == orderly.PayPaying && cur.CurrentPaymentID != "" && s.cfg.Payments != nil {
			status, err := s.cfg.Payments.CancelPayment(ctx, id, cur.CurrentPaymentID)
			switch {
			case err != nil || status == orderly.GatewayUnknown:
				s.cfg.Logger.WarnContext(ctx, "buyer cancel: the gateway could not cancel the payment in flight",
					"order_id", id, "payment_id", cur.CurrentPaymentID, "status", status, "error", err)
				return nil, orderly.Errorf(orderly.ECONFLICT, "payment %s of order %s is in flight and the gateway could not cancel it; retry",
					cur.CurrentPaymentID, id)
			case status == orderly.GatewaySucceeded:
				return nil, orderly.Errorf(orderly.EILLEGAL, "order %s was paid by payment %s before it could be cancelled", id, cur.CurrentPaymentID)
			}
			settled = cur.CurrentPaymentID
		}
		o, err := s.cancel(ctx, id, settled, actor, traceID)
		if errors.Is(err, errAttemptChanged) && round < cancelRounds {
			continue
		} else if errors.Is(err, errAttemptChanged) {
			return nil, orderly.Errorf(orderly.ECONFLICT, "order %s changed while it was being cancelled; retry", id)
		} else if err != nil {
			return nil, err
		}
		s.cfg.Signals.OutboxWritten()
		return o, nil
	}
}

// cancel closes order id for the buyer in one transaction: the attempt in flight, if any
// (settled at the gateway when there is a gateway), is marked failed, the order moves to
// closed with pay_status failed (or as it was, when no attempt was in flight), and the
// close's effects run (docs/concepts/orders-and-flows.md). errAttemptChanged: another attempt is in flight.
func (s *Service) cancel(ctx context.Context, id, settled, actor, traceID string) (*orderly.Order, error) {
	var o *orderly.Order
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		cur, flow, now, err := s.load(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := flow.CheckOrderRoutes(id); err != nil {
			return err
		}
		if _, err := flow.Next(cur.State, orderly.EventCancel); err != nil {
			return orderly.Errorf(orderly.EILLEGAL, "order %s is %s (pay status %s) and cannot be cancelled", id, cur.State, cur.PayStatus)
		}
		setPay := orderly.PayStatus("")
		if cur.PayStatus == orderly.PayPaying {
			if s.cfg.Payments != nil && cur.CurrentPaymentID != settled {
				return errAttemptChanged
			}
			if _, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{ID: cur.CurrentPaymentID,
				From: []orderly.PaymentState{orderly.PaymentInitiated}, To: orderly.PaymentFailed, FailReason: "cancelled by buyer",
			}); err != nil {
				return err
			}
			setPay = orderly.PayFailed
		}
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{id}, From: cur.State, Event: orderly.EventCancel,
			PayStatusIn: []orderly.PayStatus{cur.PayStatus}, SetPayStatus: setPay,
			Now: now, CloseReason: orderly.CloseReasonBuyerCancelled,
			Cause: string(orderly.CloseReasonBuyerCancelled), Actor: cmp.Or(actor, "buyer"), TraceID: traceID,
		}, map[string]string{id: cur.CouponID})
		if err != nil {
			return err
		} else if len(changed) == 0 {
			return errAttemptChanged // changed since it was read: look again
		}
		o, err = tx.OrderGet(ctx, id)
		return err
	})
	return o, err
}

// ApplyEvent implements orderly.OrderService. Only merchant events are accepted: ship,
// complete and refund. A refund refunds what is left of the captured amount (see
// CreateRefund): the order moves to refunding, and to refunded when the gateway confirms.
func (s *Service) ApplyEvent(ctx context.Context, id string, event orderly.Event, actor, traceID string) (*orderly.Order, error) {
	switch event {
	case orderly.EventShip, orderly.EventComplete:
	case orderly.EventRefund:
		return s.refundRest(ctx, id, cmp.Or(actor, "merchant"), traceID)
	default:
		return nil, orderly.Errorf(orderly.EINVALID, "event must be ship, complete or refund")
	}
	var o *orderly.Order
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		cur, flow, now, err := s.load(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := flow.CheckOrderRoutes(id); err != nil {
			return err
		}
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{id}, From: cur.State, Event: event, Now: now,
			Cause: string(event), Actor: cmp.Or(actor, "merchant"), TraceID: traceID,
		}, nil)
		if err != nil {
			return err
		} else if len(changed) == 0 {
			return orderly.Errorf(orderly.ECONFLICT, "order %s changed concurrently; retry", id)
		}
		o, err = tx.OrderGet(ctx, id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// ValidateCreate checks p as CreateOrder does before it writes anything (ids, currency,
// items, payment timeout, payment method). Errors: EINVALID.
func ValidateCreate(p *orderly.CreateOrderParams) error {
	_, err := validate(p)
	return err
}

// Replay looks up the order that p.UserID created with p.IdempotencyKey in tx: found is
// false when there is none (or p has no key); EIDEMPOTENCY when the key was used for
// another request (another body, or another RequestTag).
func Replay(ctx context.Context, tx store.Tx, p *orderly.CreateOrderParams) (o *orderly.Order, found bool, err error) {
	if p.IdempotencyKey == "" {
		return nil, false, nil
	}
	prev, prevHash, err := tx.OrderGetByIdempotencyKey(ctx, p.UserID, p.IdempotencyKey)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil, false, nil
	} else if err != nil {
		return nil, false, err
	}
	if prevHash != requestHash(p) {
		return nil, false, orderly.Errorf(orderly.EIDEMPOTENCY, "Idempotency-Key %q was used for a different request", p.IdempotencyKey)
	}
	return prev, true, nil
}
