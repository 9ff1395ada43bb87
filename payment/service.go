package payment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	Store store.Store
	// Gateway serves the channel SimChannel ("sim", no variant): the built-in simulated
	// gateway, or an embedder's own test gateway. It serves no other name: a channel a
	// request names that neither it nor Channels serves is refused (EINVALID). nil: "sim"
	// is not served; with no Channels either, every attempt is refused.
	Gateway orderly.Gateway
	// Channels are the real payment providers (package channel), by Adapter.Name: an
	// attempt recorded with that channel is created, inspected, cancelled and refunded
	// through it, each call bounded by CallTimeout and behind the channel's circuit
	// breaker (Breaker). A name given twice is refused.
	Channels []channel.Adapter
	// CallTimeout bounds each call to a channel's provider; channel.DefaultCallTimeout (10 s).
	CallTimeout time.Duration
	// Breaker configures each channel's circuit breaker.
	Breaker channel.BreakerConfig
	// Router, when set, picks the channel of attempts that name none (a sticky split by
	// the order's user, see channel.Router) instead of Channel, and is told every
	// attempt's outcome on a channel (a webhook's success or failure, a failed create).
	Router *channel.Router
	// Machine applies transitions and their effects; nil → order.DefaultMachine(). The
	// composition root (package engine) builds one and gives it to every service.
	Machine *order.Machine
	// Channel is recorded on attempts that name none; SimChannel ("sim"). It must be
	// served: one of Channels (those attempts go through that provider), or SimChannel with
	// Gateway set.
	Channel string
	// Wallets, when set, takes the refunds of wallet payments (channel WalletChannel): they
	// credit the buyer's wallet back (RefundExecuteHandler) instead of calling a gateway.
	Wallets orderly.WalletService
	// Signals is told of outbox messages written (the relay); nil drops them.
	Signals orderly.Signals
	Logger  *slog.Logger
	Metrics *telemetry.Metrics
}

// Service implements orderly.PaymentService, payment inspection for the close path and the
// refund handler of the outbox.
type Service struct {
	cfg      Config
	gateways map[string]orderly.Gateway // Channels by name, guarded (timeout, breaker)
}

// SimChannel is the channel Config.Gateway serves: the simulated gateway of the quick
// start and the tests, which moves no money.
const SimChannel = "sim"

// WalletChannel is the channel of payments made from the buyer's wallet (the wallet
// checkout, checkout.Channel); their channel_txn_id is "wallet:<debit transfer id>".
const WalletChannel = "wallet"

var _ orderly.PaymentService = (*Service)(nil)

// NewService returns a Service; it returns an error when cfg has no Store. Without Gateway
// and Channels it serves no channel: every payment attempt is refused (EINVALID).
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("payment: Config.Store is required")
	}
	if cfg.Machine == nil {
		cfg.Machine = order.DefaultMachine()
	}
	cfg.Channel = cmp.Or(cfg.Channel, SimChannel)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	s := &Service{cfg: cfg, gateways: map[string]orderly.Gateway{}}
	if ch, _ := orderly.SplitRoute(cfg.Channel); ch == WalletChannel {
		return nil, fmt.Errorf("payment: Config.Channel %q is the wallet checkout's channel", cfg.Channel)
	}
	for _, a := range cfg.Channels {
		name := a.Name()
		if _, dup := s.gateways[name]; dup || !order.ValidID(name) {
			return nil, fmt.Errorf("payment: channel %q is given twice or is not a valid name", name)
		} else if ch, _ := orderly.SplitRoute(name); ch == WalletChannel {
			return nil, fmt.Errorf("payment: channel %q: %q is the wallet checkout's channel", name, WalletChannel)
		}
		s.gateways[name] = channel.Guard(a, cfg.CallTimeout, cfg.Breaker, cfg.Metrics, cfg.Logger)
	}
	if _, real := s.gateways[SimChannel]; real && cfg.Gateway != nil {
		return nil, fmt.Errorf("payment: channel %q is Config.Gateway's; a channel of Config.Channels may not take its name", SimChannel)
	}
	if s.servesAny() && s.checkChannel(cfg.Channel) != nil {
		return nil, fmt.Errorf("payment: Config.Channel %q is not served (served: %s)", cfg.Channel, strings.Join(s.Served(), ", "))
	}
	return s, nil
}

// outcome counts the outcome of attempt p on its channel and variant
// (orderly_channel_payments_total{channel,variant,outcome}) and tells the router, which
// keeps the success rate of each route (p.Route(), "stripe@v2").
func (s *Service) outcome(p *orderly.Payment, captured bool) {
	label := "failed"
	if captured {
		label = "captured"
	}
	s.cfg.Metrics.ChannelPayments.WithLabelValues(p.Channel, p.Variant, label).Inc()
	if s.cfg.Router != nil {
		s.cfg.Router.Record(p.Route(), captured)
	}
}

// gatewayFor returns the gateway of channel name: its adapter among Config.Channels, else
// Config.Gateway. Errors: no gateway serves the channel.
func (s *Service) gatewayFor(name string) (orderly.Gateway, error) {
	if g, ok := s.gateways[name]; ok {
		return g, nil
	} else if s.cfg.Gateway != nil {
		return s.cfg.Gateway, nil
	}
	return nil, fmt.Errorf("no gateway serves channel %q", name)
}

// servesAny reports whether any channel is served: Config.Channels or Config.Gateway.
func (s *Service) servesAny() bool { return len(s.gateways) > 0 || s.cfg.Gateway != nil }

// Served returns the channels this service serves, sorted: the routes of Config.Channels
// ("stripe", "stripe@v2") and SimChannel when Config.Gateway is set.
func (s *Service) Served() []string {
	out := slices.Collect(maps.Keys(s.gateways))
	if s.cfg.Gateway != nil {
		out = append(out, SimChannel)
	}
	slices.Sort(out)
	return out
}

// checkChannel refuses a channel a buyer names that no gateway of this server serves
// (EINVALID, naming the served ones): one of Config.Channels by its exact route name
// ("stripe", "stripe@v2"; names are case-sensitive), or SimChannel when Config.Gateway
// is set. Nothing else falls back to Config.Gateway: a misspelled "Stripe" once landed on
// the simulator and the buyer "paid" nothing. WalletChannel is refused whatever the
// configuration: its payments are the wallet checkout's debits, recorded by its saga and
// refunded by crediting the debit back; an attempt naming it was captured by a gateway
// and its refund went to the wallet and failed, for ever. "" is the default route.
func (s *Service) checkChannel(name string) error {
	if !s.servesAny() {
		return orderly.Errorf(orderly.EINVALID, "no payment channel is configured on this server: payment attempts are refused")
	}
	if name == "" {
		return nil
	}
	if ch, _ := orderly.SplitRoute(name); ch == WalletChannel {
		return orderly.Errorf(orderly.EINVALID, "channel %q is the wallet checkout's: create the order with payment_method %q instead", name, orderly.PaymentMethodWallet)
	}
	if _, known := s.gateways[name]; known || (name == SimChannel && s.cfg.Gateway != nil) {
		return nil
	}
	return orderly.Errorf(orderly.EINVALID, "channel %q is not served here; the configured channels are %s",
		name, strings.Join(s.Served(), ", "))
}

// StartPayment implements orderly.PaymentService. The attempt is written (initiated, order
// pay_status paying) before the gateway is asked, so that a callback racing the gateway's
// answer finds it. A gateway error marks the attempt failed and is returned.
func (s *Service) StartPayment(ctx context.Context, params *orderly.StartPaymentParams) (*orderly.Payment, error) {
	if params.Channel != "" && !order.ValidID(params.Channel) {
		return nil, orderly.Errorf(orderly.EINVALID, "channel must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	}
	if params.PayerID != "" && !order.ValidID(params.PayerID) {
		return nil, orderly.Errorf(orderly.EINVALID, "payer_id must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	}
	if err := params.Metadata.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkChannel(params.Channel); err != nil {
		return nil, err
	}
	if err := s.supersede(ctx, params.OrderID); err != nil {
		return nil, err
	}
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	var (
		p  *orderly.Payment
		gw orderly.Gateway // the attempt's channel, resolved once
	)
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		o, err := tx.OrderGet(ctx, params.OrderID)
		if err != nil {
			return err
		}
		if flow, err := s.cfg.Machine.Flow(o.Flow); err != nil {
			return err
		} else if err := flow.CheckOrderRoutes(o.ID); err != nil {
			return err
		}
		if prev, err := s.providerAttemptInFlight(ctx, tx, o); err != nil {
			return err
		} else if prev != nil {
			// Another StartPayment wrote it after supersede looked: two live attempts
			// could both be paid.
			return orderly.Errorf(orderly.EPAYMENTRACE, "payment %s of order %s was started concurrently and is in flight; use it, or start again to replace it", prev.ID, o.ID)
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if o.State != orderly.StatePendingPayment {
			return orderly.Errorf(orderly.ENOTPAYABLE, "order %s is %s", o.ID, o.State)
		} else if !now.Before(o.ExpiresAt) {
			return orderly.Errorf(orderly.ENOTPAYABLE, "the payment deadline of order %s passed at %s", o.ID, o.ExpiresAt.Format(time.RFC3339Nano))
		}
		name := params.Channel
		if name == "" && s.cfg.Router != nil {
			name = s.cfg.Router.Pick(o.UserID)
		}
		ch, variant := orderly.SplitRoute(cmp.Or(name, s.cfg.Channel))
		p = &orderly.Payment{
			ID: id, OrderID: o.ID, Channel: ch, Variant: variant, Amount: o.Amount,
			Currency: o.Currency, State: orderly.PaymentInitiated, CreatedAt: now, PayerID: params.PayerID,
			Metadata: params.Metadata,
		}
		if gw, err = s.gatewayFor(p.Route()); err != nil {
			return err
		}
		// A channel that refuses the attempt for what it says (another currency) refuses it
		// before it is written: nothing changes.
		if v, ok := gw.(orderly.AttemptValidator); ok {
			if err := v.ValidateAttempt(p); err != nil {
				return err
			}
		}
		if err := tx.PaymentInsert(ctx, p); orderly.ErrorCode(err) == orderly.ECONFLICT {
			// (order_id, attempt) is unique: another attempt of the order took this number
			// after the read above.
			return orderly.Errorf(orderly.EPAYMENTRACE, "another payment attempt of order %s was started concurrently; use it, or start again to replace it", o.ID)
		} else if err != nil {
			return err
		}
		// Guarded on the current attempt read above: of two attempts started at once, the
		// second to lock the order finds another current attempt and is refused.
		ok, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{
			ID: o.ID, State: orderly.StatePendingPayment, To: orderly.PayPaying, SetPaymentID: p.ID,
			IfPaymentID: o.CurrentPaymentID, IfCurrentPayment: true,
			From:  []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
			Event: orderly.EventPaymentStarted, Cause: "payment " + p.ID, Actor: "buyer", TraceID: params.TraceID, Now: now,
		})
		if err != nil {
			return err
		} else if !ok {
			// The order changed since it was read: closed or paid just now, or another
			// attempt started at the same moment and is now current.
			cur, err := tx.OrderGet(ctx, o.ID)
			switch {
			case err != nil:
				return err
			case cur.State != orderly.StatePendingPayment:
				return orderly.Errorf(orderly.ENOTPAYABLE, "order %s is %s", o.ID, cur.State)
			case cur.CurrentPaymentID != o.CurrentPaymentID:
				return orderly.Errorf(orderly.EPAYMENTRACE, "payment %s of order %s was started concurrently and is its current attempt; use it, or start again to replace it", cur.CurrentPaymentID, o.ID)
			}
			return orderly.Errorf(orderly.ECONFLICT, "order %s changed concurrently; retry", o.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	attempt, gerr := gw.Create(ctx, p)
	if gerr == nil && attempt != nil && (attempt.ProviderRef != "" || attempt.NextAction != nil) {
		p.ProviderRef, p.NextAction = attempt.ProviderRef, attempt.NextAction
		gerr = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			return tx.PaymentSetHandoff(ctx, p.ID, p.ProviderRef, p.NextAction)
		})
	}
	if gerr != nil {
		s.outcome(p, false)
		s.cfg.Logger.Error("gateway create failed", "payment_id", p.ID, "order_id", p.OrderID, "error", gerr)
		if _, err := s.fail(ctx, p, "gateway: create failed", "gateway"); err != nil {
			return nil, errors.Join(gerr, err)
		}
		if orderly.ErrorCode(gerr) == orderly.EINTERNAL {
			// No answer (network, timeout, 5xx, breaker open): the client may retry (503).
			return nil, fmt.Errorf("start payment for order %s: %w: %w", p.OrderID, orderly.Errorf(orderly.EUNAVAILABLE,
				"payment channel %s did not answer; the attempt was not started, retry", p.Route()), gerr)
		}
		return nil, fmt.Errorf("start payment for order %s: %w", p.OrderID, gerr)
	}
	return p, nil
}

// supersede closes the order's current attempt at its provider before a new attempt
// starts (docs/payments/index.md, "A new attempt closes the previous one"). A
// provider need not notify a failed payment (WeChat Pay never does), so an attempt that
// failed at the provider or that the buyer abandoned would otherwise stay initiated while
// the order moves on. Only attempts on one of Config.Channels are closed this way; the
// built-in simulated gateway and Config.Gateway report failures themselves. The
// provider's answer to the close (channel.Adapter Cancel) decides:
//   - closed, or failed earlier → the attempt is marked failed (fail_reason "superseded:
//     closed at the provider") and the new attempt may start;
//   - paid before it could be closed → the payment is applied as a notification would be
//     (the order becomes paid) and the new attempt is refused: ENOTPAYABLE;
//   - the provider cannot tell or errs (timeout, breaker open) → nothing changes and the
//     new attempt is refused: EUNAVAILABLE (503, retry), so that an order never has two
//     attempts that could both take the buyer's money.
func (s *Service) supersede(ctx context.Context, orderID string) error {
	if len(s.gateways) == 0 {
		return nil
	}
	var prev *orderly.Payment
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		o, err := tx.OrderGet(ctx, orderID)
		if err != nil {
			return err
		}
		prev, err = s.providerAttemptInFlight(ctx, tx, o)
		return err
	})
	if err != nil || prev == nil {
		return err
	}
	gp, err := s.gateways[prev.Route()].Cancel(ctx, prev)
	if err != nil {
		s.cfg.Logger.Warn("closing the previous attempt at its provider failed", "payment_id", prev.ID, "order_id", orderID, "channel", prev.Channel, "error", err)
		return orderly.Errorf(orderly.EUNAVAILABLE, "payment %s of order %s is in flight and %s could not close it; retry", prev.ID, orderID, prev.Channel)
	}
	switch gp.Status {
	case orderly.GatewayFailed:
		if _, err := s.fail(ctx, prev, "superseded: closed at the provider", "payment"); err != nil {
			return fmt.Errorf("mark superseded payment %s failed: %w", prev.ID, err)
		}
		return nil
	case orderly.GatewaySucceeded:
		var res *orderly.CallbackResult
		err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			res, err = s.applySuccess(ctx, tx, prev, gp.ChannelTxnID, "payment")
			return err
		})
		if err != nil {
			return fmt.Errorf("apply the capture of payment %s: %w", prev.ID, err)
		}
		if res.Applied {
			s.cfg.Signals.OutboxWritten()
		}
		return orderly.Errorf(orderly.ENOTPAYABLE, "order %s was paid by payment %s", orderID, prev.ID)
	}
	return orderly.Errorf(orderly.EUNAVAILABLE, "payment %s of order %s is in flight and %s cannot tell its outcome yet; retry", prev.ID, orderID, prev.Channel)
}

// providerAttemptInFlight returns order o's current attempt when it is still initiated on
// one of Config.Channels, else nil.
func (s *Service) providerAttemptInFlight(ctx context.Context, tx store.Tx, o *orderly.Order) (*orderly.Payment, error) {
	if o.CurrentPaymentID == "" || len(s.gateways) == 0 {
		return nil, nil
	}
	p, err := tx.PaymentGet(ctx, o.CurrentPaymentID)
	if err != nil {
		return nil, err
	}
	if _, real := s.gateways[p.Route()]; !real || p.State != orderly.PaymentInitiated {
		return nil, nil
	}
	return p, nil
}

// Payment implements orderly.PaymentService.
func (s *Service) Payment(ctx context.Context, id string) (p *orderly.Payment, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		p, err = tx.PaymentGet(ctx, id)
		return err
	})
	return p, err
}

// OrderPayments implements orderly.PaymentService.
func (s *Service) OrderPayments(ctx context.Context, orderID string) (ps []*orderly.Payment, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.OrderGet(ctx, orderID); err != nil {
			return err
		}
		ps, err = tx.PaymentList(ctx, orderID)
		return err
	})
	return ps, err
}

// HandleCallback implements orderly.PaymentService. A refused callback (unknown payment,
// another order, another amount or currency, an invalid status, a channel transaction
// recorded on another payment) changes nothing; it is counted, logged and stored in its own
// transaction by RefuseCallback, and its error returned.
func (s *Service) HandleCallback(ctx context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
	var res *orderly.CallbackResult
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) (err error) {
		res, err = s.applyCallback(ctx, tx, cb, "callback")
		return err
	})
	return s.callbackDone(ctx, cb, res, err)
}

// applyCallback applies a verified callback in tx (HandleCallback); actor is recorded in
// the audit trail. A refusal is a *refusal error.
func (s *Service) applyCallback(ctx context.Context, tx store.Tx, cb *orderly.Callback, actor string) (*orderly.CallbackResult, error) {
	p, err := tx.PaymentGet(ctx, cb.PaymentID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil, refused(orderly.RefusalUnknownPayment, err)
	} else if err != nil {
		return nil, err
	} else if err := check(cb, p); err != nil {
		return nil, err
	}
	if cb.Status == orderly.CallbackSucceeded {
		return s.applySuccess(ctx, tx, p, cb.ChannelTxnID, actor)
	}
	return s.applyFailure(ctx, tx, p, cb.Status, actor)
}

// callbackDone finishes a callback after its transaction: a refusal is stored
// (RefuseCallback), the relay woken after a change, the outcome counted.
func (s *Service) callbackDone(ctx context.Context, cb *orderly.Callback, res *orderly.CallbackResult, err error) (*orderly.CallbackResult, error) {
	if err != nil {
		var r *refusal
		if errors.As(err, &r) {
			s.RefuseCallback(ctx, cb, r.reason, r.err)
		}
		return nil, err
	}
	result := "duplicate"
	switch {
	case res.Refund:
		result = "refund"
		s.cfg.Signals.OutboxWritten()
	case res.Applied:
		result = "applied"
		s.cfg.Signals.OutboxWritten()
	}
	if (res.Applied || res.Refund) && res.Payment != nil {
		// The attempt's own channel: two versions of a provider may share one endpoint.
		s.outcome(res.Payment, cb.Status == orderly.CallbackSucceeded)
	}
	s.cfg.Metrics.Callbacks.WithLabelValues(cb.Status, result).Inc()
	return res, nil
}

// check refuses a callback that does not match its payment: another order
// (EORDERMISMATCH), another currency or, for a success, another amount (EAMOUNTMISMATCH),
// or an unknown status (EINVALID).
func check(cb *orderly.Callback, p *orderly.Payment) error {
	switch {
	case p.OrderID != cb.OrderID:
		return refused(orderly.RefusalOrderMismatch, orderly.Errorf(orderly.EORDERMISMATCH,
			"payment %s belongs to order %s, not to order %s", p.ID, p.OrderID, cb.OrderID))
	case cb.Status != orderly.CallbackSucceeded && cb.Status != orderly.CallbackFailed && cb.Status != orderly.CallbackExpired:
		return refused(orderly.RefusalInvalidStatus, orderly.Errorf(orderly.EINVALID, "status must be succeeded, failed or expired"))
	case cb.Currency != p.Currency:
		return refused(orderly.RefusalCurrencyMismatch, orderly.Errorf(orderly.EAMOUNTMISMATCH,
			"callback says %d %s; payment %s is %d %s", cb.Amount, cb.Currency, p.ID, p.Amount, p.Currency))
	case cb.Status == orderly.CallbackSucceeded && cb.Amount != p.Amount:
		return refused(orderly.RefusalAmountMismatch, orderly.Errorf(orderly.EAMOUNTMISMATCH,
			"callback says %d %s; payment %s is %d %s", cb.Amount, cb.Currency, p.ID, p.Amount, p.Currency))
	}
	return nil
}

// refusal is an error that refuses a callback for a reason (orderly.Refusal*); it unwraps
// to the domain error that the caller is answered with.
type refusal struct {
	reason string
	err    error
}

func refused(reason string, err error) error { return &refusal{reason: reason, err: err} }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refusalReasons are the reasons the store accepts.
var refusalReasons = []string{
	orderly.RefusalInvalidInput, orderly.RefusalInvalidStatus, orderly.RefusalUnknownPayment, orderly.RefusalOrderMismatch,
	orderly.RefusalAmountMismatch, orderly.RefusalCurrencyMismatch, orderly.RefusalChannelTxnConflict,
}

// refusalWriteTimeout bounds the transaction that stores a refusal: it runs after the
// refused one, also when the caller has gone away.
const refusalWriteTimeout = 5 * time.Second

// RefuseCallback implements orderly.PaymentService: it counts the refusal
// (orderly_payment_callbacks_total{result="refused"} and
// orderly_payment_callback_refusals_total{reason}), logs it at warn with the payment and
// order ids and stores it in callback_refusals in a transaction of its own. An unknown
// reason is stored as invalid_input. A failure to store is logged, never returned: the
// caller answers the refusal either way.
func (s *Service) RefuseCallback(ctx context.Context, cb *orderly.Callback, reason string, cause error) {
	if !slices.Contains(refusalReasons, reason) {
		reason = orderly.RefusalInvalidInput
	}
	status := cb.Status
	if status != orderly.CallbackSucceeded && status != orderly.CallbackFailed && status != orderly.CallbackExpired {
		status = "invalid" // a bounded label: the status is whatever the body said
	}
	s.cfg.Metrics.Callbacks.WithLabelValues(status, "refused").Inc()
	s.cfg.Metrics.CallbackRefusals.WithLabelValues(reason).Inc()
	detail := orderly.ErrorMessage(cause)
	s.cfg.Logger.WarnContext(ctx, "payment callback refused", "payment_id", cb.PaymentID, "order_id", cb.OrderID,
		"reason", reason, "status", cb.Status, "amount", cb.Amount, "currency", cb.Currency,
		"channel_txn_id", cb.ChannelTxnID, "detail", detail)
	body := cb.Body
	if body == nil {
		body, _ = json.Marshal(cb) // strings, numbers and a time always marshal
	}
	r := &orderly.CallbackRefusal{
		PaymentID: cb.PaymentID, OrderID: cb.OrderID, Reason: reason, Detail: detail, Status: cb.Status,
		Amount: cb.Amount, Currency: cb.Currency, ChannelTxnID: cb.ChannelTxnID, Body: string(body),
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refusalWriteTimeout)
	defer cancel()
	err := s.cfg.Store.InTx(wctx, func(tx store.Tx) error {
		now, err := tx.Now(wctx)
		if err != nil {
			return err
		}
		r.CreatedAt = now
		return tx.CallbackRefusalInsert(wctx, r)
	})
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "store a refused payment callback", "payment_id", cb.PaymentID,
			"order_id", cb.OrderID, "reason", reason, "error", err)
	}
}

// MaxRefusals is the most refusals CallbackRefusals returns for one payment id.
const MaxRefusals = 1000

// CallbackRefusals implements orderly.PaymentService; it returns at most MaxRefusals.
func (s *Service) CallbackRefusals(ctx context.Context, paymentID string) (rs []*orderly.CallbackRefusal, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		rs, err = tx.CallbackRefusalList(ctx, paymentID, MaxRefusals)
		return err
	})
	return rs, err
}

// applySuccess records a captured payment at most once (guarded initiated|failed →
// succeeded) and applies it: to its order when the order still waits for payment (commit
// reservations, use the coupon, order.paid), else by requesting a refund (I2). The
// channel transaction id names one capture at the provider:
//   - already recorded on this attempt (or on an extra capture of it): a duplicate;
//   - recorded on another payment: refused with ECHANNELTXN, naming that payment;
//   - new, for an attempt that already captured (succeeded, refund_pending, refunded): a
//     second capture, recorded as its own payment and refunded (recordExtraCapture).
func (s *Service) applySuccess(ctx context.Context, tx store.Tx, p *orderly.Payment, txnID, actor string) (*orderly.CallbackResult, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, err
	}
	if txnID != "" {
		if res, err := sameCapture(ctx, tx, p, txnID); res != nil || err != nil {
			return res, err
		}
	}
	ok, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
		ID: p.ID, From: []orderly.PaymentState{orderly.PaymentInitiated, orderly.PaymentFailed},
		To: orderly.PaymentSucceeded, ChannelTxnID: txnID, SucceededAt: &now,
	})
	if err != nil {
		return nil, err
	}
	if !ok {
		cur, err := tx.PaymentGet(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		if cur.ChannelTxnID == txnID {
			// A concurrent callback for the same capture applied it while this one waited
			// for the payment's row (sameCapture above read before that wait).
			return &orderly.CallbackResult{Applied: false, Payment: cur}, nil
		}
		if cur.ChannelTxnID == "" || txnID == "" {
			// One side does not name the capture (a gateway's answer without a transaction
			// id): nothing tells a second capture from the first, so it is the same one.
			if cur.ChannelTxnID == "" && txnID != "" {
				if _, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{ID: cur.ID,
					From: []orderly.PaymentState{cur.State}, To: cur.State, ChannelTxnID: txnID}); err != nil {
					return nil, err
				}
			}
			return &orderly.CallbackResult{Applied: false, Payment: cur}, nil
		}
		return s.recordExtraCapture(ctx, tx, cur, txnID, now)
	}
	o, err := tx.OrderGet(ctx, p.OrderID)
	if err != nil {
		return nil, err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return nil, err
	}
	var changed []string
	// The order takes the payment when its flow has a pay transition from its state (the
	// transition's effects commit the reservations, use the coupon, publish order.paid, and
	// whatever else the flow declares).
	if _, err := flow.Transition(o.State, orderly.EventPay); err == nil {
		changed, err = s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: o.State, Event: orderly.EventPay,
			PayStatusIn:  []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
			SetPayStatus: orderly.PayPaid, SetPaidAt: true, Now: now, Cause: "payment " + p.ID, Actor: actor,
		}, map[string]string{o.ID: o.CouponID})
		if err != nil {
			return nil, err
		}
	}
	res := &orderly.CallbackResult{Applied: true}
	if len(changed) != 1 {
		// The order no longer takes this payment (closed, or paid by another attempt).
		if _, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
			ID: p.ID, From: []orderly.PaymentState{orderly.PaymentSucceeded}, To: orderly.PaymentRefundPending,
		}); err != nil {
			return nil, err
		}
		if err := requestRefund(ctx, tx, p.ID, o.ID, p.Amount, txnID, now); err != nil {
			return nil, err
		}
		res.Refund = true
		s.cfg.Logger.Info("payment for an order that no longer takes it; refunding",
			"payment_id", p.ID, "order_id", o.ID, "state", o.State, "pay_status", o.PayStatus)
	}
	res.Payment, err = tx.PaymentGet(ctx, p.ID)
	return res, err
}

// sameCapture looks up the payment that recorded txnID: a duplicate result when it is p
// or another capture of the same attempt, ECHANNELTXN when it is another payment, and
// nil, nil when no payment recorded it.
func sameCapture(ctx context.Context, tx store.Tx, p *orderly.Payment, txnID string) (*orderly.CallbackResult, error) {
	holder, err := tx.PaymentGetByChannelTxnID(ctx, txnID)
	switch {
	case orderly.ErrorCode(err) == orderly.ENOTFOUND:
		return nil, nil
	case err != nil:
		return nil, err
	case cmp.Or(holder.DuplicateOf, holder.ID) == cmp.Or(p.DuplicateOf, p.ID):
		return &orderly.CallbackResult{Applied: false, Payment: holder}, nil
	}
	return nil, refused(orderly.RefusalChannelTxnConflict, orderly.Errorf(orderly.ECHANNELTXN,
		"channel_txn_id %q is already recorded on payment %s of order %s, not on payment %s",
		txnID, holder.ID, holder.OrderID, p.ID))
}

// recordExtraCapture records a second capture of attempt p (the provider reports channel
// transaction txnID besides the one p recorded) as its own payment, linked by DuplicateOf,
// and refunds it through the outbox: an order keeps one capture, whatever its state.
func (s *Service) recordExtraCapture(ctx context.Context, tx store.Tx, p *orderly.Payment, txnID string, now time.Time) (*orderly.CallbackResult, error) {
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	dup := &orderly.Payment{
		ID: id, OrderID: p.OrderID, Channel: p.Channel, Variant: p.Variant, ChannelTxnID: txnID, Amount: p.Amount, Currency: p.Currency,
		State: orderly.PaymentRefundPending, CreatedAt: now, SucceededAt: &now, DuplicateOf: cmp.Or(p.DuplicateOf, p.ID),
	}
	err = tx.Savepoint(ctx, func() error { return tx.PaymentInsert(ctx, dup) })
	if orderly.ErrorCode(err) == orderly.ECONFLICT {
		// A concurrent callback for the same capture may have recorded it first.
		if res, err := sameCapture(ctx, tx, p, txnID); res != nil || err != nil {
			return res, err
		}
	}
	if err != nil {
		return nil, err
	}
	if err := requestRefund(ctx, tx, dup.ID, dup.OrderID, dup.Amount, txnID, now); err != nil {
		return nil, err
	}
	s.cfg.Logger.Warn("second capture of a payment attempt; recorded and refunding",
		"payment_id", dup.ID, "duplicate_of", dup.DuplicateOf, "order_id", dup.OrderID,
		"channel_txn_id", txnID, "recorded_channel_txn_id", p.ChannelTxnID, "amount", dup.Amount)
	return &orderly.CallbackResult{Applied: true, Refund: true, Payment: dup}, nil
}

// requestRefund writes the payment.refund message of a payment that is refund_pending.
func requestRefund(ctx context.Context, tx store.Tx, paymentID, orderID string, amount int64, txnID string, now time.Time) error {
	m, err := outbox.NewMessage(orderly.TopicPaymentRefund, paymentID,
		orderly.PaymentRef{PaymentID: paymentID, OrderID: orderID, Amount: amount, ChannelTxnID: txnID}, now)
	if err != nil {
		return err
	}
	return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m})
}

// applyFailure records a failed or expired attempt (guarded initiated → failed) and, only
// when it is the order's current attempt and the order is pending_payment or closed, sets
// the order's pay_status to failed.
func (s *Service) applyFailure(ctx context.Context, tx store.Tx, p *orderly.Payment, reason, actor string) (*orderly.CallbackResult, error) {
	ok, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
		ID: p.ID, From: []orderly.PaymentState{orderly.PaymentInitiated}, To: orderly.PaymentFailed, FailReason: reason,
	})
	if err != nil {
		return nil, err
	}
	if ok {
		// A pending order may be paid again; a closed one (closed while the attempt was in
		// flight, settled by payment.cancel) stops reading paying.
		if err := orderPayFailed(ctx, tx, p.OrderID, p.ID, "payment "+p.ID+": "+reason, actor,
			orderly.StatePendingPayment, orderly.StateClosed); err != nil {
			return nil, err
		}
	}
	cur, err := tx.PaymentGet(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	return &orderly.CallbackResult{Applied: ok, Payment: cur}, nil
}

// orderPayFailed sets the pay_status of order orderID from paying to failed when
// paymentID is its current attempt and the order is in one of states, with its audit row.
func orderPayFailed(ctx context.Context, tx store.Tx, orderID, paymentID, cause, actor string, states ...orderly.State) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	for _, state := range states {
		changed, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{
			ID: orderID, State: state, From: []orderly.PayStatus{orderly.PayPaying}, To: orderly.PayFailed,
			IfPaymentID: paymentID, Event: orderly.EventPaymentFailed, Cause: cause, Actor: actor, Now: now,
		})
		if err != nil || changed {
			return err
		}
	}
	return nil
}

// fail marks an attempt failed in its own transaction.
func (s *Service) fail(ctx context.Context, p *orderly.Payment, reason, actor string) (bool, error) {
	var ok bool
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		res, err := s.applyFailure(ctx, tx, p, reason, actor)
		if err == nil {
			ok = res.Applied
		}
		return err
	})
	return ok, err
}
