package payment

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/store"
)

// HandleNotification applies a verified notification of a payment channel (package
// channel) at most once per (n.Channel, n.EventID): the pair is recorded in channel_events
// in the same transaction as the notification's effect, so a provider's retries and
// duplicates, in parallel or days later, answer Applied=false and change nothing.
//
//   - PaymentSucceeded, PaymentFailed: applied exactly as a callback (HandleCallback) with
//     the payment's own order: a duplicate capture, a payment after the close (refunded,
//     I2), a second capture (recorded and refunded) and every refusal (unknown payment,
//     amount or currency mismatch, channel transaction on another payment: stored in
//     callback_refusals and counted) behave the same. A refused notification is not
//     recorded as handled: the provider's retry is refused (and stored) again.
//   - PaymentPending, Ignored: recorded, nothing else changes.
//   - RefundSucceeded, RefundFailed naming orderly's refund (n.RefundID: a refund id, or
//     PaymentRefundKey for the automatic refund of a whole payment): the refund is
//     confirmed (as the outbox refund handlers' Apply does) or failed (its amount becomes
//     refundable again); a repeat of either, or a refund unknown to orderly (made at the
//     provider's dashboard), changes nothing. A failure of a refund orderly already
//     recorded as succeeded (Stripe's refund.updated with status failed) reverses it
//     (reverseRefundTx): the refund becomes failed, refund.reversed is written and counted
//     in orderly_refund_reversals_total{channel,outcome}; the order's amount and items
//     become refundable again and restocked units are taken back, or, for an order already
//     refunded, the money owed becomes a reconciliation finding (refund_mismatch).
//
// Errors: those of HandleCallback for the payment kinds; transient store errors. Nothing
// is recorded on error.
func (s *Service) HandleNotification(ctx context.Context, n *channel.Notification) (*orderly.CallbackResult, error) {
	if n.UnexpectedVersion != "" {
		s.cfg.Metrics.ChannelVersionMismatches.WithLabelValues(n.Channel, n.UnexpectedVersion).Inc()
	}
	var (
		res      *orderly.CallbackResult
		cb       *orderly.Callback
		reversal string // the outcome of a refund reversal, counted once committed
	)
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		reversal = ""
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		inserted, err := tx.ChannelEventInsert(ctx, &store.ChannelEvent{Channel: n.Channel, EventID: n.EventID,
			Kind: string(n.Kind), PaymentID: n.PaymentID, ReceivedAt: now})
		if err != nil {
			return err
		}
		res = &orderly.CallbackResult{}
		if !inserted {
			return nil // a duplicate of a notification handled before
		}
		switch n.Kind {
		case channel.PaymentSucceeded, channel.PaymentFailed:
			cb = &orderly.Callback{PaymentID: n.PaymentID, ChannelTxnID: n.ChannelTxnID, Amount: n.Amount,
				Currency: n.Currency, Status: orderly.CallbackSucceeded, OccurredAt: n.OccurredAt, Body: n.Body}
			if n.Kind == channel.PaymentFailed {
				cb.Status = orderly.CallbackFailed
			}
			// The notification names the payment only: the order is the payment's own.
			if p, err := tx.PaymentGet(ctx, n.PaymentID); err == nil {
				cb.OrderID = p.OrderID
			}
			res, err = s.applyCallback(ctx, tx, cb, n.Channel)
			return err
		case channel.RefundSucceeded, channel.RefundFailed:
			res.Applied, reversal, err = s.applyRefundNotification(ctx, tx, n)
			return err
		}
		return nil
	})
	if cb != nil {
		res, err = s.callbackDone(ctx, cb, res, err)
	} else if err == nil && res.Applied {
		s.cfg.Signals.OutboxWritten()
	}
	if err == nil && reversal != "" {
		s.cfg.Metrics.RefundReversals.WithLabelValues(n.Channel, reversal).Inc()
	}
	result := "recorded"
	var r *refusal
	switch {
	case errors.As(err, &r):
		result = "refused"
	case err != nil:
		return nil, fmt.Errorf("handle %s notification %s: %w", n.Channel, n.EventID, err)
	case res.Refund:
		result = "refund"
	case res.Applied:
		result = "applied" // its outcome is counted by callbackDone
	case n.Kind == channel.PaymentSucceeded || n.Kind == channel.PaymentFailed:
		result = "duplicate"
	}
	s.cfg.Metrics.ChannelNotifications.WithLabelValues(n.Channel, string(n.Kind), result).Inc()
	return res, err
}

// applyRefundNotification confirms or fails the refund n names; applied is false for a
// repeat or a refund orderly does not know. reversal is the outcome of the reversal of a
// refund confirmed before (reverseRefundTx), "" otherwise.
func (s *Service) applyRefundNotification(ctx context.Context, tx store.Tx, n *channel.Notification) (applied bool, reversal string, err error) {
	if paymentID, ok := strings.CutPrefix(n.RefundID, PaymentRefundKey("")); ok {
		p, err := tx.PaymentGet(ctx, paymentID)
		if orderly.ErrorCode(err) == orderly.ENOTFOUND {
			return false, "", nil
		} else if err != nil {
			return false, "", err
		}
		if n.Kind == channel.RefundFailed {
			s.cfg.Logger.ErrorContext(ctx, "the provider failed the refund of a whole payment; the money was not returned",
				"channel", n.Channel, "payment_id", p.ID, "order_id", p.OrderID, "state", p.State, "event_id", n.EventID)
			return false, "", nil
		}
		applied, err := s.confirmPaymentRefund(ctx, tx, &orderly.PaymentRef{PaymentID: p.ID, OrderID: p.OrderID, Amount: p.Amount,
			ChannelTxnID: p.ChannelTxnID})
		return applied, "", err
	}
	f, err := tx.RefundGet(ctx, n.RefundID)
	if n.RefundID == "" || orderly.ErrorCode(err) == orderly.ENOTFOUND {
		s.cfg.Logger.InfoContext(ctx, "a refund orderly did not make; recorded, nothing changed",
			"channel", n.Channel, "event_id", n.EventID, "payment_id", n.PaymentID, "amount", n.Amount)
		return false, "", nil
	} else if err != nil {
		return false, "", err
	}
	ref := &orderly.RefundRef{RefundID: f.ID, OrderID: f.OrderID, PaymentID: f.PaymentID, Amount: f.Amount, Currency: f.Currency}
	if n.Kind == channel.RefundFailed {
		if f.State == orderly.RefundSucceeded {
			s.cfg.Logger.WarnContext(ctx, "the provider failed a refund orderly recorded as succeeded; the money was not returned",
				"channel", n.Channel, "refund_id", f.ID, "order_id", f.OrderID, "amount", f.Amount, "event_id", n.EventID)
			reversal, err := s.reverseRefundTx(ctx, tx, f, n.Channel)
			return err == nil && reversal != "", reversal, err
		}
		applied, err := s.failRefundTx(ctx, tx, ref, "refund failed at "+n.Channel)
		return applied, "", err
	}
	if f.State != orderly.RefundRequested {
		return false, "", nil
	}
	return true, "", s.completeRefunds(ctx, tx, ref)
}
