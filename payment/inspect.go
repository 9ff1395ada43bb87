package payment

import (
	"context"
	"fmt"
	"slices"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// InspectPayment is active payment inspection (docs/concepts/deadlines-and-closing.md), called by the close
// path for an order that is due while its attempt paymentID is in flight. It asks the
// gateway and settles the attempt:
//   - captured → the payment is applied (the order becomes paid): GatewaySucceeded;
//   - failed, or still pending and cancelled at the gateway → the attempt is marked failed
//     and the order's pay_status failed, so the order may close: GatewayFailed;
//   - the gateway cannot tell, or errs → nothing changes: GatewayUnknown (with the error).
func (s *Service) InspectPayment(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error) {
	p, settled, err := s.attemptInFlight(ctx, "inspect", orderID, paymentID)
	if p == nil {
		return settled, err
	}
	gw, err := s.gatewayFor(p.Route())
	if err != nil {
		return orderly.GatewayUnknown, fmt.Errorf("inspect payment %s: %w", paymentID, err)
	}
	gp, err := gw.Query(ctx, p)
	if err != nil {
		s.cfg.Metrics.PaymentInspections.WithLabelValues("error").Inc()
		return orderly.GatewayUnknown, fmt.Errorf("inspect payment %s: query: %w", paymentID, err)
	}
	if gp.Status == orderly.GatewayPending {
		if gp, err = gw.Cancel(ctx, p); err != nil {
			s.cfg.Metrics.PaymentInspections.WithLabelValues("error").Inc()
			return orderly.GatewayUnknown, fmt.Errorf("inspect payment %s: cancel: %w", paymentID, err)
		}
	}
	s.cfg.Metrics.PaymentInspections.WithLabelValues(string(gp.Status)).Inc()
	switch gp.Status {
	case orderly.GatewaySucceeded:
		var res *orderly.CallbackResult
		err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			res, err = s.applySuccess(ctx, tx, p, gp.ChannelTxnID, "inspection")
			return err
		})
		if err != nil {
			return orderly.GatewayUnknown, fmt.Errorf("inspect payment %s: apply success: %w", paymentID, err)
		}
		if res.Applied {
			s.cfg.Signals.OutboxWritten()
		}
		return orderly.GatewaySucceeded, nil
	case orderly.GatewayFailed:
		if _, err := s.fail(ctx, p, "cancelled at close", "inspection"); err != nil {
			return orderly.GatewayUnknown, fmt.Errorf("inspect payment %s: mark failed: %w", paymentID, err)
		}
		return orderly.GatewayFailed, nil
	}
	return orderly.GatewayUnknown, nil
}

// CancelPayment stops attempt paymentID of order orderID at the gateway before a buyer
// cancel closes the order (it implements order.PaymentCanceller). It asks the gateway to
// cancel, outside any database transaction, and reports what the gateway says:
//   - captured before it could be cancelled → the payment is applied here, as a callback
//     would (the order becomes paid, or the money is refunded if the order closed
//     meanwhile): GatewaySucceeded;
//   - cancelled, or failed earlier → GatewayFailed; the attempt is left initiated for the
//     caller to mark failed in the transaction that closes the order;
//   - the gateway cannot tell, or errs → GatewayUnknown (with the error); nothing changes.
//
// An attempt that already has an outcome is not sent to the gateway again.
func (s *Service) CancelPayment(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error) {
	p, settled, err := s.attemptInFlight(ctx, "cancel", orderID, paymentID)
	if p == nil {
		return settled, err
	}
	gw, err := s.gatewayFor(p.Route())
	if err != nil {
		return orderly.GatewayUnknown, fmt.Errorf("cancel payment %s: %w", paymentID, err)
	}
	gp, err := gw.Cancel(ctx, p)
	if err != nil {
		return orderly.GatewayUnknown, fmt.Errorf("cancel payment %s: %w", paymentID, err)
	}
	switch gp.Status {
	case orderly.GatewaySucceeded:
		var res *orderly.CallbackResult
		err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			res, err = s.applySuccess(ctx, tx, p, gp.ChannelTxnID, "cancel")
			return err
		})
		if err != nil {
			return orderly.GatewayUnknown, fmt.Errorf("cancel payment %s: apply its capture: %w", paymentID, err)
		}
		if res.Applied {
			s.cfg.Signals.OutboxWritten()
		}
		return orderly.GatewaySucceeded, nil
	case orderly.GatewayFailed:
		return orderly.GatewayFailed, nil
	}
	return orderly.GatewayUnknown, nil
}

// askRefund asks gw for refund r: the refund itself, or, when it was asked before (a
// message delivered again, a refund accepted but not final), what became of it, and the
// refund itself only when the provider has none under r's key (ENOTFOUND). A provider's
// idempotency replays its first answer, so asking again could never see a pending refund
// end. Errors: the gateway's (*orderly.Error: refused).
func askRefund(ctx context.Context, gw orderly.Gateway, r *orderly.GatewayRefund, askedBefore bool) (*orderly.GatewayRefundResult, error) {
	if askedBefore {
		res, err := gw.QueryRefund(ctx, r)
		if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return res, err
		}
	}
	return gw.Refund(ctx, r)
}

// PaymentRefundKey is the gateway idempotency key of the automatic refund of a whole
// payment (I2): one such refund per payment.
func PaymentRefundKey(paymentID string) string { return "payment:" + paymentID }

// attemptInFlight reads attempt paymentID of order orderID for op ("inspect", "cancel"). It
// returns the payment when the attempt is still initiated, so the gateway must be asked;
// otherwise a nil payment and what the attempt's recorded outcome says (GatewayFailed for a
// failed attempt, GatewaySucceeded for a captured one), or GatewayUnknown with the error when
// the attempt is missing (ENOTFOUND) or belongs to another order.
func (s *Service) attemptInFlight(ctx context.Context, op, orderID, paymentID string) (*orderly.Payment, orderly.GatewayStatus, error) {
	p, err := s.Payment(ctx, paymentID)
	if err != nil {
		return nil, orderly.GatewayUnknown, err
	} else if p.OrderID != orderID {
		return nil, orderly.GatewayUnknown, fmt.Errorf("%s payment %s: it belongs to order %s, not %s", op, paymentID, p.OrderID, orderID)
	}
	switch p.State {
	case orderly.PaymentInitiated:
		return p, "", nil
	case orderly.PaymentFailed:
		return nil, orderly.GatewayFailed, nil
	default:
		return nil, orderly.GatewaySucceeded, nil
	}
}

// CancelHandler returns the outbox handler of payment.cancel (orderly.EffectCancelPayment):
// the attempt of an order that closed while the attempt was in flight is settled as at an
// inspection (InspectPayment), after the close's commit: a pending attempt is cancelled at
// the gateway and marked failed, a failed one marked failed, a captured one applied, which
// on the closed order requests its refund (I2). While the gateway cannot tell (or errs),
// Call returns an error and the relay retries with its backoff; after its attempts the
// message is a dead letter (reconcile: outbox_dead) for an operator. An attempt already
// settled (a callback came first) is not sent to the gateway again.
func (s *Service) CancelHandler() outbox.Handler {
	return outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error {
			var ref orderly.PaymentRef
			if err := outbox.Decode(m, &ref); err != nil {
				return outbox.Permanent(err)
			}
			status, err := s.InspectPayment(ctx, ref.OrderID, ref.PaymentID)
			switch {
			case err != nil:
				return fmt.Errorf("settle payment %s of closed order %s: %w", ref.PaymentID, ref.OrderID, err)
			case status == orderly.GatewayUnknown:
				return fmt.Errorf("settle payment %s of closed order %s: the gateway cannot tell its outcome yet", ref.PaymentID, ref.OrderID)
			case status == orderly.GatewayFailed:
				// Failed before this message ran, without the order being told (a closed
				// order's failed attempt was written on the payment only, before this
				// version): the order stops reading paying.
				return s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
					return orderPayFailed(ctx, tx, ref.OrderID, ref.PaymentID, "payment "+ref.PaymentID+" failed", "payment.cancel", orderly.StateClosed)
				})
			}
			return nil
		},
	}
}

// RefundHandler returns the outbox handler of payment.refund, the refund of a whole payment
// the order does not keep (I2): Call asks the gateway to refund (idempotent per payment id,
// see PaymentRefundKey) and returns nil only once the provider confirms it (askRefund: a
// refund accepted but not final is asked about again with backoff); a refusal is logged
// and retried, for the money must go back. Apply marks the payment refunded (guarded
// refund_pending → refunded), completes a merchant refund made before refunds had their own
// table, and writes the payment.refunded event.
func (s *Service) RefundHandler() outbox.Handler {
	return outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error {
			var ref orderly.PaymentRef
			if err := outbox.Decode(m, &ref); err != nil {
				return err
			}
			p, err := s.Payment(ctx, ref.PaymentID)
			if err != nil {
				return fmt.Errorf("refund payment %s: %w", ref.PaymentID, err)
			}
			gw, err := s.gatewayFor(p.Route())
			if err != nil {
				return err
			}
			r := &orderly.GatewayRefund{IdempotencyKey: PaymentRefundKey(ref.PaymentID), PaymentID: ref.PaymentID,
				Amount: ref.Amount, Currency: p.Currency, Payment: p}
			res, err := askRefund(ctx, gw, r, m.Attempts > 1)
			if err != nil {
				return err
			}
			switch res.Status {
			case orderly.GatewaySucceeded:
				return nil
			case orderly.GatewayFailed:
				// The money must go back: the provider failing it is retried, then dead-lettered
				// for an operator.
				return fmt.Errorf("refund of payment %s failed at %s (%s); asked again", ref.PaymentID, p.Channel, res.Detail)
			}
			return outbox.Pending(fmt.Errorf("refund of payment %s is %s at %s, not final yet; asked again", ref.PaymentID, res.Detail, p.Channel))
		},
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			for _, m := range msgs {
				if err := s.applyRefund(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// applyRefund marks one refunded payment, completes its order's merchant refund once no
// other payment of the order waits for its refund (a second capture's refund does not end
// the merchant refund of the first), and writes the payment.refunded event.
func (s *Service) applyRefund(ctx context.Context, tx store.Tx, m *orderly.Message) error {
	var ref orderly.PaymentRef
	if err := outbox.Decode(m, &ref); err != nil {
		return err
	}
	_, err := s.confirmPaymentRefund(ctx, tx, &ref)
	return err
}

// confirmPaymentRefund records the gateway's confirmation of the refund of a whole payment
// (guarded refund_pending → refunded) and what follows (applyRefund); changed is false for
// a repeat.
func (s *Service) confirmPaymentRefund(ctx context.Context, tx store.Tx, ref *orderly.PaymentRef) (changed bool, err error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return false, err
	}
	ok, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
		ID: ref.PaymentID, From: []orderly.PaymentState{orderly.PaymentRefundPending},
		To: orderly.PaymentRefunded, RefundedAt: &now,
	})
	if err != nil || !ok {
		return false, err
	}
	o, err := tx.OrderGet(ctx, ref.OrderID)
	if err != nil {
		return true, err
	}
	if o.State == orderly.StateClosed {
		// The order's current attempt paid after the close and was returned: say so.
		if _, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{ID: o.ID, State: orderly.StateClosed,
			From: []orderly.PayStatus{orderly.PayUnpaid, orderly.PayFailed, orderly.PayPaying}, To: orderly.PayRefunded,
			IfPaymentID: ref.PaymentID, Event: orderly.EventPaymentRefunded, Cause: "payment " + ref.PaymentID,
			Actor: "gateway", Now: now}); err != nil {
			return true, err
		}
	}
	complete := o.State == orderly.StateRefunding
	if complete {
		// Only a merchant refund requested before refunds had their own table (migration
		// 00004) went through payment.refund: an order with refunds is completed by
		// refund.execute, and a payment.refund of it is a second capture's.
		refunds, err := tx.RefundList(ctx, o.ID)
		if err != nil {
			return true, err
		}
		complete = len(refunds) == 0
	}
	if complete {
		payments, err := tx.PaymentList(ctx, o.ID)
		if err != nil {
			return true, err
		}
		// While another refund of the order is under way, its completion ends the refund.
		complete = !slices.ContainsFunc(payments, func(p *orderly.Payment) bool { return p.State == orderly.PaymentRefundPending })
	}
	if complete {
		flow, err := s.cfg.Machine.Flow(o.Flow)
		if err != nil {
			return true, err
		}
		if _, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: orderly.StateRefunding, Event: orderly.EventRefundComplete,
			SetPayStatus: orderly.PayRefunded, Now: now, Cause: "payment " + ref.PaymentID, Actor: "gateway",
		}, nil); err != nil {
			return true, err
		}
	}
	// The event is about the order: keyed by the order id, with the order's next sequence, so
	// that subscribers never see it before the order's earlier events (order.closed).
	p, err := tx.PaymentGet(ctx, ref.PaymentID) // its metadata as it is now
	if err != nil {
		return true, err
	}
	event := *ref
	event.Metadata = p.Metadata
	ev, err := outbox.NewEvent(ctx, tx, orderly.TopicPaymentRefunded, ref.OrderID, &event, now)
	if err != nil {
		return true, err
	}
	return true, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{ev})
}
