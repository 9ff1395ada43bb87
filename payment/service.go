package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	Store   store.Store
	Gateway orderly.Gateway
	Flows   orderly.Flows // nil → orderly.DefaultFlows()
	// Channel is recorded on attempts that name none; "sim".
	Channel string
	// WakeRelay, when set, is called after a commit that wrote outbox messages.
	WakeRelay func()
	Logger    *slog.Logger
	Metrics   *telemetry.Metrics
}

// Service implements orderly.PaymentService, payment inspection for the close path and the
// refund handler of the outbox.
type Service struct {
	cfg Config
}

var _ orderly.PaymentService = (*Service)(nil)

// NewService returns a Service; it returns an error when cfg has no Store or Gateway.
func NewService(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Gateway == nil {
		return nil, errors.New("payment: Config.Store and Config.Gateway are required")
	}
	if cfg.Flows == nil {
		cfg.Flows = orderly.DefaultFlows()
	}
	cfg.Channel = cmp.Or(cfg.Channel, "sim")
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	if cfg.WakeRelay == nil {
		cfg.WakeRelay = func() {}
	}
	return &Service{cfg: cfg}, nil
}

// StartPayment implements orderly.PaymentService. The attempt is written (initiated, order
// pay_status paying) before the gateway is asked, so that a callback racing the gateway's
// answer finds it. A gateway error marks the attempt failed and is returned.
func (s *Service) StartPayment(ctx context.Context, params *orderly.StartPaymentParams) (*orderly.Payment, error) {
	if params.Channel != "" && !order.ValidID(params.Channel) {
		return nil, orderly.Errorf(orderly.EINVALID, "channel must be 1–%d bytes of UTF-8 without control characters", order.MaxIDLength)
	}
	id, err := order.NewID()
	if err != nil {
		return nil, err
	}
	var p *orderly.Payment
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		o, err := tx.OrderGet(ctx, params.OrderID)
		if err != nil {
			return err
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
		p = &orderly.Payment{
			ID: id, OrderID: o.ID, Channel: cmp.Or(params.Channel, s.cfg.Channel), Amount: o.Amount,
			Currency: o.Currency, State: orderly.PaymentInitiated, CreatedAt: now,
		}
		if err := tx.PaymentInsert(ctx, p); err != nil {
			return err
		}
		ok, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{
			ID: o.ID, State: orderly.StatePendingPayment, To: orderly.PayPaying, SetPaymentID: p.ID,
			From: []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
		})
		if err != nil {
			return err
		} else if !ok {
			// The order changed since it was read: most likely closed or paid just now.
			if cur, err := tx.OrderGet(ctx, o.ID); err == nil && cur.State != orderly.StatePendingPayment {
				return orderly.Errorf(orderly.ENOTPAYABLE, "order %s is %s", o.ID, cur.State)
			}
			return orderly.Errorf(orderly.ECONFLICT, "order %s changed concurrently; retry", o.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if gerr := s.cfg.Gateway.Create(ctx, p); gerr != nil {
		s.cfg.Logger.Error("gateway create failed", "payment_id", p.ID, "order_id", p.OrderID, "error", gerr)
		if _, err := s.fail(ctx, p, "gateway: create failed"); err != nil {
			return nil, errors.Join(gerr, err)
		}
		return nil, fmt.Errorf("start payment for order %s: %w", p.OrderID, gerr)
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

// HandleCallback implements orderly.PaymentService.
func (s *Service) HandleCallback(ctx context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
	var res *orderly.CallbackResult
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		p, err := tx.PaymentGet(ctx, cb.PaymentID)
		if err != nil {
			return err
		} else if p.OrderID != cb.OrderID {
			return orderly.Errorf(orderly.ENOTFOUND, "payment %s does not belong to order %s", cb.PaymentID, cb.OrderID)
		} else if cb.Currency != p.Currency || (cb.Status == orderly.CallbackSucceeded && cb.Amount != p.Amount) {
			return orderly.Errorf(orderly.EAMOUNTMISMATCH, "callback says %d %s; payment %s is %d %s",
				cb.Amount, cb.Currency, p.ID, p.Amount, p.Currency)
		}
		switch cb.Status {
		case orderly.CallbackSucceeded:
			res, err = s.applySuccess(ctx, tx, p, cb.ChannelTxnID, "callback")
		case orderly.CallbackFailed, orderly.CallbackExpired:
			res, err = s.applyFailure(ctx, tx, p, cb.Status)
		default:
			err = orderly.Errorf(orderly.EINVALID, "status must be succeeded, failed or expired")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	result := "duplicate"
	switch {
	case res.Refund:
		result = "refund"
		s.cfg.WakeRelay()
	case res.Applied:
		result = "applied"
		s.cfg.WakeRelay()
	}
	s.cfg.Metrics.Callbacks.WithLabelValues(cb.Status, result).Inc()
	return res, nil
}

// applySuccess records a captured payment at most once (guarded initiated|failed →
// succeeded) and applies it: to its order when the order still waits for payment (commit
// reservations, use the coupon, order.paid), else by requesting a refund (I2).
func (s *Service) applySuccess(ctx context.Context, tx store.Tx, p *orderly.Payment, txnID, actor string) (*orderly.CallbackResult, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, err
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
		if cur.ChannelTxnID != txnID {
			s.cfg.Logger.Warn("success callback with another channel_txn_id for a settled payment",
				"payment_id", p.ID, "channel_txn_id", txnID, "recorded", cur.ChannelTxnID, "state", cur.State)
		}
		return &orderly.CallbackResult{Applied: false, Payment: cur}, nil
	}
	o, err := tx.OrderGet(ctx, p.OrderID)
	if err != nil {
		return nil, err
	}
	flow, err := s.cfg.Flows.Get(o.Flow)
	if err != nil {
		return nil, err
	}
	var changed []string
	if o.State == orderly.StatePendingPayment {
		changed, err = order.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: orderly.StatePendingPayment, Event: orderly.EventPay,
			PayStatusIn:  []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
			SetPayStatus: orderly.PayPaid, SetPaidAt: true, Now: now, Cause: "payment " + p.ID, Actor: actor,
		})
		if err != nil {
			return nil, err
		}
	}
	res := &orderly.CallbackResult{Applied: true}
	if len(changed) == 1 {
		if _, err := tx.ReservationsCommit(ctx, o.ID, now); err != nil {
			return nil, err
		}
		if o.CouponID != "" {
			if ok, err := tx.CouponUse(ctx, o.CouponID, o.ID); err != nil {
				return nil, err
			} else if !ok {
				return nil, fmt.Errorf("use coupon %s of order %s: not frozen by it", o.CouponID, o.ID)
			}
		}
		m, err := outbox.NewMessage(orderly.TopicOrderPaid, o.ID, orderly.OrderEvent{OrderID: o.ID, State: orderly.StatePaid, At: now}, now)
		if err != nil {
			return nil, err
		}
		if err := tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m}); err != nil {
			return nil, err
		}
	} else {
		// The order no longer takes this payment (closed, or paid by another attempt).
		if _, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
			ID: p.ID, From: []orderly.PaymentState{orderly.PaymentSucceeded}, To: orderly.PaymentRefundPending,
		}); err != nil {
			return nil, err
		}
		m, err := outbox.NewMessage(orderly.TopicPaymentRefund, p.ID, orderly.PaymentRef{PaymentID: p.ID, OrderID: o.ID, Amount: p.Amount}, now)
		if err != nil {
			return nil, err
		}
		if err := tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m}); err != nil {
			return nil, err
		}
		res.Refund = true
		s.cfg.Logger.Info("payment for an order that no longer takes it; refunding",
			"payment_id", p.ID, "order_id", o.ID, "state", o.State, "pay_status", o.PayStatus)
	}
	res.Payment, err = tx.PaymentGet(ctx, p.ID)
	return res, err
}

// applyFailure records a failed or expired attempt (guarded initiated → failed) and, only
// when it is the order's current attempt, sets the order's pay_status to failed.
func (s *Service) applyFailure(ctx context.Context, tx store.Tx, p *orderly.Payment, reason string) (*orderly.CallbackResult, error) {
	ok, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
		ID: p.ID, From: []orderly.PaymentState{orderly.PaymentInitiated}, To: orderly.PaymentFailed, FailReason: reason,
	})
	if err != nil {
		return nil, err
	}
	if ok {
		if _, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{
			ID: p.OrderID, State: orderly.StatePendingPayment, From: []orderly.PayStatus{orderly.PayPaying},
			To: orderly.PayFailed, IfPaymentID: p.ID,
		}); err != nil {
			return nil, err
		}
	}
	cur, err := tx.PaymentGet(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	return &orderly.CallbackResult{Applied: ok, Payment: cur}, nil
}

// fail marks an attempt failed in its own transaction.
func (s *Service) fail(ctx context.Context, p *orderly.Payment, reason string) (bool, error) {
	var ok bool
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		res, err := s.applyFailure(ctx, tx, p, reason)
		if err == nil {
			ok = res.Applied
		}
		return err
	})
	return ok, err
}
