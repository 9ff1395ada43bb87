package payment

import (
	"context"
	"errors"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// RefundExecuteHandler returns the outbox handler of refund.execute, the gateway side of a
// refund made by order.Service.CreateRefund:
//
//   - Call asks the gateway to refund, with the refund id as idempotency key, so a message
//     delivered again (a crash between the call and the commit, a failed Apply) never
//     refunds twice. A refusal by the gateway (an *orderly.Error) marks the refund failed
//     in its own transaction — its amount and item counts become refundable again; stock it
//     restocked stays restocked, the goods are back — and writes refund.failed.
//   - Apply marks the refund succeeded (guarded requested → succeeded, so once) and moves
//     the order through the flow with an audit row: when the succeeded refunds add up to
//     the captured amount, refunding --refund_complete--> refunded with pay_status refunded
//     and an order.refunded event; otherwise --partial_refund--> the same state with
//     pay_status partially_refunded. It writes refund.succeeded.
func (s *Service) RefundExecuteHandler() outbox.Handler {
	return outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error {
			var ref orderly.RefundRef
			if err := outbox.Decode(m, &ref); err != nil {
				return err
			}
			gw, err := s.gatewayOfPayment(ctx, ref.PaymentID)
			if err != nil {
				return err
			}
			err = gw.Refund(ctx, &orderly.GatewayRefund{
				IdempotencyKey: ref.RefundID, PaymentID: ref.PaymentID, Amount: ref.Amount, Currency: ref.Currency,
			})
			var refused *orderly.Error
			if errors.As(err, &refused) {
				s.cfg.Logger.Warn("gateway refused a refund", "refund_id", ref.RefundID, "order_id", ref.OrderID,
					"payment_id", ref.PaymentID, "amount", ref.Amount, "error", err)
				return s.failRefund(ctx, &ref, refused.Message)
			}
			return err
		},
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			for _, m := range msgs {
				var ref orderly.RefundRef
				if err := outbox.Decode(m, &ref); err != nil {
					return err
				}
				if err := s.completeRefund(ctx, tx, &ref); err != nil {
					return fmt.Errorf("complete refund %s of order %s: %w", ref.RefundID, ref.OrderID, err)
				}
			}
			return nil
		},
	}
}

// completeRefund records the gateway's confirmation of one refund; a repeat is a no-op.
func (s *Service) completeRefund(ctx context.Context, tx store.Tx, ref *orderly.RefundRef) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	ok, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{
		ID: ref.RefundID, From: orderly.RefundRequested, To: orderly.RefundSucceeded, CompletedAt: now,
	})
	if err != nil || !ok {
		return err // !ok: confirmed before, or refused (failRefund)
	}
	o, err := tx.OrderGet(ctx, ref.OrderID)
	if err != nil {
		return err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return err
	}
	refunds, err := tx.RefundList(ctx, o.ID)
	if err != nil {
		return err
	}
	var succeeded int64
	for _, f := range refunds {
		if f.State == orderly.RefundSucceeded {
			succeeded += f.Amount
		}
	}
	cause := "refund " + ref.RefundID
	// The events about the order, each with its next sequence (outbox.NewEvents).
	topics := make([]string, 0, 2)
	payloads := make([]orderly.Sequenced, 0, 2)
	if succeeded >= o.Amount {
		from := o.State
		if from != orderly.StateRefunding {
			// Cannot happen through CreateRefund, which moves the order to refunding when the
			// requested total reaches the amount; kept so the flow is followed regardless.
			if _, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
				IDs: []string{o.ID}, From: from, Event: orderly.EventRefund, Now: now, Cause: cause, Actor: "gateway",
			}, nil); err != nil {
				return err
			}
			from = orderly.StateRefunding
		}
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: from, Event: orderly.EventRefundComplete,
			SetPayStatus: orderly.PayRefunded, Now: now, Cause: cause, Actor: "gateway",
		}, nil)
		if err != nil {
			return err
		} else if len(changed) != 1 {
			return fmt.Errorf("order %s changed concurrently", o.ID)
		}
		topics = append(topics, orderly.TopicOrderRefunded)
		payloads = append(payloads, &orderly.OrderEvent{OrderID: o.ID, State: orderly.StateRefunded, Reason: cause, At: now})
	} else {
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: o.State, Event: orderly.EventPartialRefund,
			PayStatusIn:  []orderly.PayStatus{orderly.PayPaid, orderly.PayPartiallyRefunded},
			SetPayStatus: orderly.PayPartiallyRefunded, Now: now, Cause: cause, Actor: "gateway",
		}, nil)
		if err != nil {
			return err
		} else if len(changed) != 1 {
			return fmt.Errorf("order %s (%s, pay status %s) changed concurrently", o.ID, o.State, o.PayStatus)
		}
	}
	succeededRef := *ref // the command's payload stays as it was
	topics = append(topics, orderly.TopicRefundSucceeded)
	payloads = append(payloads, &succeededRef)
	msgs := make([]*store.OutboxInsertParams, len(topics))
	for i, topic := range topics {
		if msgs[i], err = outbox.NewEvent(ctx, tx, topic, o.ID, payloads[i], now); err != nil {
			return err
		}
	}
	return tx.OutboxInsert(ctx, msgs)
}

// failRefund records a refund the gateway refused, in its own transaction: the refund
// becomes failed, its amount leaves the order's refunded_amount and its items their
// reservations' refunded counts (restocked units stay restocked). A repeat is a no-op.
func (s *Service) failRefund(ctx context.Context, ref *orderly.RefundRef, reason string) error {
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		_, err := s.failRefundTx(ctx, tx, ref, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("fail refund %s of order %s: %w", ref.RefundID, ref.OrderID, err)
	}
	return nil
}

// failRefundTx is failRefund in tx; changed is false when the refund was not requested
// (a repeat, or a refund confirmed before).
func (s *Service) failRefundTx(ctx context.Context, tx store.Tx, ref *orderly.RefundRef, reason string) (changed bool, err error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return true, err
	}
	f, err := tx.RefundGet(ctx, ref.RefundID)
	if err != nil {
		return true, err
	}
	ok, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{
		ID: f.ID, From: orderly.RefundRequested, To: orderly.RefundFailed, FailReason: "gateway: " + reason, CompletedAt: now,
	})
	if err != nil || !ok {
		return false, err
	}
	o, err := tx.OrderGet(ctx, f.OrderID)
	if err != nil {
		return true, err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return true, err
	}
	if ok, err := tx.OrderAddRefunded(ctx, &store.OrderAddRefundedParams{ID: f.OrderID, Delta: -f.Amount, States: order.RefundStates(flow)}); err != nil {
		return true, err
	} else if !ok {
		return true, fmt.Errorf("give back %d of order %s: refunded amount guard refused", f.Amount, f.OrderID)
	}
	for _, it := range f.Items {
		if ok, err := tx.ReservationRefund(ctx, &store.ReservationRefundParams{OrderID: f.OrderID, SKU: it.SKU, Refunded: -it.Quantity}); err != nil {
			return true, err
		} else if !ok {
			return true, fmt.Errorf("give back %d refunded units of sku %s of order %s: guard refused", it.Quantity, it.SKU, f.OrderID)
		}
	}
	failedRef := *ref // the command's payload stays as it was
	ev, err := outbox.NewEvent(ctx, tx, orderly.TopicRefundFailed, f.OrderID, &failedRef, now)
	if err != nil {
		return true, err
	}
	return true, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{ev})
}
