package payment

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// RefundExecuteHandler returns the outbox handler of refund.execute, the gateway side of a
// refund made by order.Service.CreateRefund:
//
//   - Call first reads the refund: one no longer requested (failed by a provider's
//     notification, or confirmed) is not sent again. Otherwise it asks the gateway to
//     refund, with the refund id as idempotency key, or, when it may have asked before (a
//     later delivery, a refund the provider answered pending), what became of it
//     (askRefund), so a message delivered again never refunds twice. A refusal by the
//     gateway (an *orderly.Error) or a refund the provider failed marks the refund failed
//     in its own transaction — its amount and item counts become refundable again; stock
//     never moved for it — and writes refund.failed. A refund accepted but not final
//     (GatewayPending) records the provider's state (provider_status) and is asked about
//     again (outbox.Pending); any other error leaves the outcome unknown. Either way the
//     refund stays requested: its units counted, not restocked, nothing announced.
//   - Apply marks the refund succeeded (guarded requested → succeeded, so once), puts its
//     units back in stock when it asks for a restock (order.RestockRefund: goods returned
//     are restocked when the refund is confirmed), and moves the order through the flow
//     with an audit row: when the succeeded refunds add up to
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
			// A refund no longer requested was settled while this message waited (a provider's
			// notification failed it, or confirmed it before a redelivery): asking the gateway
			// again could only start a second refund. Apply's guarded update is then a no-op.
			var f *orderly.Refund
			if err := s.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
				f, err = tx.RefundGet(ctx, ref.RefundID)
				return err
			}); err != nil {
				return fmt.Errorf("refund %s of order %s: %w", ref.RefundID, ref.OrderID, err)
			}
			if f.State != orderly.RefundRequested {
				s.cfg.Logger.Info("refund already settled; the gateway is not asked again", "refund_id", ref.RefundID,
					"order_id", ref.OrderID, "state", f.State)
				return nil
			}
			wallet, res, answer, err := s.executeRefund(ctx, &ref, f, m.Attempts > 1 || f.ProviderStatus != "")
			if err != nil {
				return err // the refund was not asked: retried
			}
			var refused *orderly.Error
			if errors.As(answer, &refused) && (!wallet || !retryableWalletError(refused.Code)) {
				s.cfg.Logger.Warn("gateway refused a refund", "refund_id", ref.RefundID, "order_id", ref.OrderID,
					"payment_id", ref.PaymentID, "amount", ref.Amount, "error", answer)
				return s.failRefund(ctx, &ref, refused.Message)
			} else if answer != nil || res == nil {
				return answer
			}
			switch res.Status {
			case orderly.GatewayFailed:
				s.cfg.Logger.Warn("the provider failed a refund", "refund_id", ref.RefundID, "order_id", ref.OrderID,
					"payment_id", ref.PaymentID, "amount", ref.Amount, "provider_status", res.Detail)
				return s.failRefund(ctx, &ref, "failed at the provider: "+res.Detail)
			case orderly.GatewaySucceeded:
				if res.ProviderRef != "" && res.ProviderRef != f.ProviderRef {
					return s.setRefundProvider(ctx, f.ID, res.ProviderRef, "")
				}
				return nil
			}
			// Accepted, not final: it stays requested, neither counted as succeeded, restocked
			// nor announced, and is asked about again with backoff (or confirmed by the
			// provider's notification meanwhile).
			if err := s.setRefundProvider(ctx, f.ID, cmp.Or(res.ProviderRef, f.ProviderRef), cmp.Or(res.Detail, "pending")); err != nil {
				return err
			}
			return outbox.Pending(fmt.Errorf("refund %s is %s at the provider, not final yet; asked again", ref.RefundID, cmp.Or(res.Detail, "pending")))
		},
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			refs := make([]*orderly.RefundRef, len(msgs))
			for i, m := range msgs {
				refs[i] = new(orderly.RefundRef)
				if err := outbox.Decode(m, refs[i]); err != nil {
					return err
				}
			}
			return s.completeRefunds(ctx, tx, refs...)
		},
	}
}

// executeRefund asks for refund ref (f as stored) where its payment was taken: a wallet
// payment (channel WalletChannel, with Config.Wallets) is refunded to the buyer's wallet, a
// wallet refund of the payment's debit transfer under the key "refund:<refund id>", so
// that a message delivered again credits once (res succeeded: a wallet refund is final when
// answered); any other through its channel's gateway, keyed by the refund id (askRefund,
// askedBefore saying it may have been asked already). answer is the wallet's or the
// gateway's error (wallet says which); err is a failure before the refund was asked (the
// payment could not be read, no gateway serves its channel), which says nothing of the
// refund: the caller retries.
func (s *Service) executeRefund(ctx context.Context, ref *orderly.RefundRef, f *orderly.Refund, askedBefore bool) (wallet bool, res *orderly.GatewayRefundResult, answer, err error) {
	p, err := s.Payment(ctx, ref.PaymentID)
	if err != nil {
		return false, nil, nil, fmt.Errorf("the channel of payment %s: %w", ref.PaymentID, err)
	}
	if p.Channel == WalletChannel && s.cfg.Wallets != nil {
		transfer, ok := strings.CutPrefix(p.ChannelTxnID, WalletChannel+":")
		if !ok || transfer == "" {
			return true, nil, orderly.Errorf(orderly.EILLEGAL, "wallet payment %s names no debit transfer (%q)", p.ID, p.ChannelTxnID), nil
		}
		_, answer = s.cfg.Wallets.Refund(ctx, &orderly.WalletRefundParams{TransferID: transfer, Amount: ref.Amount,
			IdempotencyKey: "refund:" + ref.RefundID})
		return true, &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, answer, nil
	}
	gw, err := s.gatewayFor(p.Route())
	if err != nil {
		return false, nil, nil, err
	}
	res, answer = askRefund(ctx, gw, &orderly.GatewayRefund{IdempotencyKey: ref.RefundID, PaymentID: ref.PaymentID,
		Amount: ref.Amount, Currency: ref.Currency, Payment: p, ProviderRefundRef: f.ProviderRef}, askedBefore)
	return false, res, answer, nil
}

// setRefundProvider records the provider's refund id and non-final state on a requested
// refund, in its own transaction.
func (s *Service) setRefundProvider(ctx context.Context, id, providerRef, status string) error {
	return s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.RefundSetProvider(ctx, id, providerRef, status)
		return err
	})
}

// retryableWalletError reports whether a wallet error leaves a refund's outcome to a retry
// (a busy database, a concurrent change) rather than refusing it.
func retryableWalletError(code string) bool {
	return code == orderly.EUNAVAILABLE || code == orderly.EINTERNAL || code == orderly.ECONFLICT
}

// completeRefunds records the gateway's confirmation of the refunds refs, in tx: each
// refund, then its order's transition and events (completeRefund), and last the units of
// those that ask for a restock, all at once in SKU order (order.RestockRefunds): stock rows
// are the last rows a transaction takes, in one order, so a batch of confirmations
// cannot deadlock with creates and closes. A repeat is a no-op. Errors: the store's,
// wrapped with the refund they concern.
func (s *Service) completeRefunds(ctx context.Context, tx store.Tx, refs ...*orderly.RefundRef) error {
	restock := make([]*orderly.Refund, 0, len(refs))
	for _, ref := range refs {
		f, err := s.completeRefund(ctx, tx, ref)
		if err != nil {
			return fmt.Errorf("complete refund %s of order %s: %w", ref.RefundID, ref.OrderID, err)
		}
		if f != nil {
			restock = append(restock, f)
		}
	}
	return order.RestockRefunds(ctx, tx, restock...)
}

// completeRefund records the gateway's confirmation of one refund, moves its order and
// writes its events; it returns the refund when it confirmed it (nil for a repeat), whose
// units the caller restocks after its other writes (completeRefunds).
func (s *Service) completeRefund(ctx context.Context, tx store.Tx, ref *orderly.RefundRef) (*orderly.Refund, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{
		ID: ref.RefundID, From: orderly.RefundRequested, To: orderly.RefundSucceeded, CompletedAt: now,
	})
	if err != nil || !ok {
		return nil, err // !ok: confirmed before, or refused (failRefund)
	}
	f, err := tx.RefundGet(ctx, ref.RefundID)
	if err != nil {
		return nil, err
	}
	o, err := tx.OrderGet(ctx, ref.OrderID)
	if err != nil {
		return nil, err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return nil, err
	}
	refunds, err := tx.RefundList(ctx, o.ID)
	if err != nil {
		return nil, err
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
				return nil, err
			}
			from = orderly.StateRefunding
		}
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: from, Event: orderly.EventRefundComplete,
			SetPayStatus: orderly.PayRefunded, Now: now, Cause: cause, Actor: "gateway",
		}, nil)
		if err != nil {
			return nil, err
		} else if len(changed) != 1 {
			return nil, fmt.Errorf("order %s changed concurrently", o.ID)
		}
		topics = append(topics, orderly.TopicOrderRefunded)
		payloads = append(payloads, &orderly.OrderEvent{OrderID: o.ID, State: orderly.StateRefunded, Reason: cause, At: now, Metadata: o.Metadata})
	} else {
		changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
			IDs: []string{o.ID}, From: o.State, Event: orderly.EventPartialRefund,
			PayStatusIn:  []orderly.PayStatus{orderly.PayPaid, orderly.PayPartiallyRefunded},
			SetPayStatus: orderly.PayPartiallyRefunded, Now: now, Cause: cause, Actor: "gateway",
		}, nil)
		if err != nil {
			return nil, err
		} else if len(changed) != 1 {
			return nil, fmt.Errorf("order %s (%s, pay status %s) changed concurrently", o.ID, o.State, o.PayStatus)
		}
	}
	succeededRef := *ref // the command's payload stays as it was
	succeededRef.Metadata = f.Metadata
	topics = append(topics, orderly.TopicRefundSucceeded)
	payloads = append(payloads, &succeededRef)
	msgs := make([]*store.OutboxInsertParams, len(topics))
	for i, topic := range topics {
		if msgs[i], err = outbox.NewEvent(ctx, tx, topic, o.ID, payloads[i], now); err != nil {
			return nil, err
		}
	}
	return f, tx.OutboxInsert(ctx, msgs)
}

// failRefund records a refund the gateway refused, in its own transaction: the refund
// becomes failed, its amount leaves the order's refunded_amount and its items their
// reservations' refunded counts (stock never moved for a refund not confirmed). A repeat
// is a no-op.
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
	kept, err := order.UnrefundItems(ctx, tx, f, false)
	if err != nil {
		return true, err
	} else if len(kept) > 0 {
		s.cfg.Logger.ErrorContext(ctx, "a failed refund's units were restocked and sold again; they stay counted as refunded",
			"refund_id", f.ID, "order_id", f.OrderID, "skus", kept)
	}
	failedRef := *ref               // the command's payload stays as it was
	failedRef.Metadata = f.Metadata // as it is now: the merchant may have changed it since
	ev, err := outbox.NewEvent(ctx, tx, orderly.TopicRefundFailed, f.OrderID, &failedRef, now)
	if err != nil {
		return true, err
	}
	return true, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{ev})
}

// Outcomes of a refund reversal (orderly_refund_reversals_total{outcome}).
const (
	ReversalGivenBack    = "given_back"    // the order's amount and items are refundable again
	ReversalOperatorTask = "operator_task" // the order was refunded (terminal): reconciliation reports the money owed
)

// reverseRefundTx records, in tx, that the provider failed refund f after it had confirmed
// it (Stripe: a refund.updated with status failed after succeeded; the money did not reach
// the buyer). The refund goes succeeded → failed (guarded, so once; fail_reason says it
// was reversed) and a refund.reversed event is written. Then:
//   - when the order may still be refunded (order.RefundStates of its flow: paid, shipped,
//     completed, refunding), the refund is given back as a refused one would be: its amount
//     leaves refunded_amount, its items their refunded counts, the units it restocked are
//     taken back from available stock (available → sold; units sold again meanwhile stay
//     counted, logged and reported by reconciliation as refund_mismatch), and pay_status
//     follows the refunds still succeeded (partially_refunded or paid, audit event
//     refund_reversed);
//   - when the order is refunded, a terminal state of every flow, nothing else changes: the
//     money owed to the buyer is an operator task, reported by reconciliation
//     (refund_mismatch: pay_status refunded while the succeeded refunds fall short) and
//     logged at error.
//
// It returns the outcome (ReversalGivenBack, ReversalOperatorTask) and "" when the refund
// was not succeeded (a repeat).
func (s *Service) reverseRefundTx(ctx context.Context, tx store.Tx, f *orderly.Refund, channelName string) (string, error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return "", err
	}
	ok, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{
		ID: f.ID, From: orderly.RefundSucceeded, To: orderly.RefundFailed, CompletedAt: now,
		FailReason: "reversed: " + channelName + " failed the refund after confirming it",
	})
	if err != nil || !ok {
		return "", err
	}
	o, err := tx.OrderGet(ctx, f.OrderID)
	if err != nil {
		return "", err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return "", err
	}
	ref := order.RefundRef(f)
	ev, err := outbox.NewEvent(ctx, tx, orderly.TopicRefundReversed, f.OrderID, &ref, now) // the order's next event sequence
	if err != nil {
		return "", err
	}
	if err := tx.OutboxInsert(ctx, []*store.OutboxInsertParams{ev}); err != nil {
		return "", err
	}
	states := order.RefundStates(flow)
	if !slices.Contains(states, o.State) {
		s.cfg.Logger.ErrorContext(ctx, "the provider failed a refund of an order already refunded; the money is owed to the buyer (operator task)",
			"channel", channelName, "refund_id", f.ID, "order_id", f.OrderID, "state", o.State, "amount", f.Amount)
		return ReversalOperatorTask, nil
	}
	if ok, err := tx.OrderAddRefunded(ctx, &store.OrderAddRefundedParams{ID: f.OrderID, Delta: -f.Amount, States: states}); err != nil {
		return "", err
	} else if !ok {
		return "", fmt.Errorf("give back %d of order %s: refunded amount guard refused", f.Amount, f.OrderID)
	}
	kept, err := order.UnrefundItems(ctx, tx, f, true)
	if err != nil {
		return "", err
	} else if len(kept) > 0 {
		s.cfg.Logger.ErrorContext(ctx, "a reversed refund's units were sold again; they stay counted as refunded and restocked",
			"refund_id", f.ID, "order_id", f.OrderID, "skus", kept)
	}
	refunds, err := tx.RefundList(ctx, o.ID)
	if err != nil {
		return "", err
	}
	want := orderly.PayPaid
	for _, g := range refunds {
		if g.State == orderly.RefundSucceeded {
			want = orderly.PayPartiallyRefunded
		}
	}
	if o.PayStatus != want {
		if _, err := tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{ID: o.ID, State: o.State,
			From: []orderly.PayStatus{o.PayStatus}, To: want, Event: orderly.EventRefundReversed,
			Cause: "refund " + f.ID + " reversed by " + channelName, Actor: "gateway", Now: now}); err != nil {
			return "", err
		}
	}
	return ReversalGivenBack, nil
}
