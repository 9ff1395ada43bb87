package order

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// MaxRefundReason is the longest refund reason, in bytes.
const MaxRefundReason = 512

var _ orderly.RefundService = (*Service)(nil)

// RefundableStates are the states from which an order may be refunded: paid, shipped and
// completed (a return after delivery), and refunding, where the whole captured amount is
// already requested, so that only the amount of a refund the gateway refused can be
// requested again.
var RefundableStates = []orderly.State{orderly.StatePaid, orderly.StateShipped, orderly.StateCompleted, orderly.StateRefunding}

// RefundStates returns the states of flow from which an order may be refunded: those
// with a refund or partial_refund transition. For the standard flow they are
// RefundableStates.
func RefundStates(flow *orderly.Flow) []orderly.State {
	var states []orderly.State
	for _, t := range flow.Transitions {
		if (t.Event == orderly.EventRefund || t.Event == orderly.EventPartialRefund) && !slices.Contains(states, t.From) {
			states = append(states, t.From)
		}
	}
	return states
}

// validateRefund checks p's shape (not the order's figures, which the store guards).
// Errors: EINVALID.
func validateRefund(p *orderly.CreateRefundParams) error {
	switch {
	case !orderly.ValidAmount(p.Amount):
		return orderly.Errorf(orderly.EINVALID, "amount %s", orderly.AmountRule)
	case len(p.Items) > MaxItems:
		return orderly.Errorf(orderly.EINVALID, "items must hold at most %d lines", MaxItems)
	case p.Restock && len(p.Items) == 0:
		return orderly.Errorf(orderly.EINVALID, "restock needs items: name the units that go back to stock")
	case len(p.Reason) > MaxRefundReason || !utf8.ValidString(p.Reason):
		return orderly.Errorf(orderly.EINVALID, "reason must be at most %d bytes of UTF-8", MaxRefundReason)
	case len(p.IdempotencyKey) > 255:
		return orderly.Errorf(orderly.EINVALID, "Idempotency-Key is longer than 255 characters")
	}
	if err := p.Metadata.Validate(); err != nil {
		return err
	}
	seen := make(map[string]bool, len(p.Items))
	for i, it := range p.Items {
		switch {
		case !ValidID(it.SKU):
			return orderly.Errorf(orderly.EINVALID, "items[%d].sku %s", i, idRule)
		case seen[it.SKU]:
			return orderly.Errorf(orderly.EINVALID, "items[%d].sku %q appears twice; merge the lines", i, it.SKU)
		case it.Quantity <= 0 || it.Quantity > MaxQuantity:
			return orderly.Errorf(orderly.EINVALID, "items[%d].quantity must be 1–%d", i, MaxQuantity)
		}
		seen[it.SKU] = true
	}
	return nil
}

// refundHash fingerprints the parts of a refund request that define the refund.
func refundHash(p *orderly.CreateRefundParams) string {
	b, _ := json.Marshal(p) // json tags exclude the order id, idempotency key, actor and trace id
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CreateRefund implements orderly.RefundService. In one transaction it:
//  1. adds the amount to the order's refunded_amount with a guarded update (the order is
//     in a RefundableStates state and the total stays within the captured amount), so two
//     concurrent refunds that together exceed it never both pass: EREFUNDEXCEEDS;
//  2. counts each item against the units the order bought and not yet refunded, guarded
//     per SKU: EREFUNDITEMS. Units to restock go back to available stock when the gateway
//     confirms the refund (payment.Service.RefundExecuteHandler), not before: a refund the
//     gateway refuses never moved stock, so asking again cannot restock the same units
//     twice;
//  3. writes the refund (requested) and its refund.execute message: the gateway refund,
//     keyed by the refund id, made by the relay (payment.Service.RefundExecuteHandler);
//  4. when the refunded total reaches the captured amount, moves the order to refunding
//     (the refund event): refunded once the gateway has confirmed every refund.
//
// A partial refund keeps the order's state; its confirmation sets pay_status
// partially_refunded (the partial_refund event). Nothing is written on error.
func (s *Service) CreateRefund(ctx context.Context, p *orderly.CreateRefundParams) (*orderly.Refund, bool, error) {
	if err := validateRefund(p); err != nil {
		return nil, false, err
	}
	id, err := NewID()
	if err != nil {
		return nil, false, err
	}
	items := slices.SortedFunc(slices.Values(p.Items), func(a, b orderly.RefundItem) int { return strings.Compare(a.SKU, b.SKU) })
	hash := refundHash(p)
	var (
		f       *orderly.Refund
		created bool
	)
	// Two attempts: a concurrent refund with the same idempotency key can win the unique
	// index between our lookup and our insert; the second attempt then finds its refund.
	for attempt := 0; attempt < 2; attempt++ {
		err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			if p.IdempotencyKey != "" {
				prev, prevHash, err := tx.RefundGetByIdempotencyKey(ctx, p.OrderID, p.IdempotencyKey)
				if err == nil {
					if prevHash != hash {
						return orderly.Errorf(orderly.EIDEMPOTENCY, "Idempotency-Key %q was used for a different refund of order %s", p.IdempotencyKey, p.OrderID)
					}
					f, created = prev, false
					return nil
				} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
					return err
				}
			}
			cur, flow, now, err := s.load(ctx, tx, p.OrderID)
			if err != nil {
				return err
			}
			if err := flow.CheckOrderRoutes(cur.ID); err != nil {
				return err // a trip's refund releases its payout too (ride.Service.RefundTrip)
			}
			refundable := RefundStates(flow)
			if !slices.Contains(refundable, cur.State) {
				return orderly.Errorf(orderly.EILLEGAL, "order %s is %s; flow %s refunds orders only in %v", cur.ID, cur.State, flow.Name, refundable)
			}
			paymentID, err := capturedPayment(ctx, tx, cur)
			if err != nil {
				return err
			}
			ok, err := tx.OrderAddRefunded(ctx, &store.OrderAddRefundedParams{ID: cur.ID, Delta: p.Amount, States: refundable})
			if err != nil {
				return err
			}
			after, err := tx.OrderGet(ctx, cur.ID) // as changed by us, or by the refund that won
			if err != nil {
				return err
			}
			if !ok {
				if !slices.Contains(refundable, after.State) {
					return orderly.Errorf(orderly.EILLEGAL, "order %s is %s; flow %s refunds orders only in %v", after.ID, after.State, flow.Name, refundable)
				}
				return orderly.Errorf(orderly.EREFUNDEXCEEDS, "a refund of %d %s exceeds what is left to refund of order %s: captured %d, refunded or requested %d, left %d",
					p.Amount, after.Currency, after.ID, after.Amount, after.RefundedAmount, after.Amount-after.RefundedAmount)
			}
			if err := refundItems(ctx, tx, cur.ID, items); err != nil {
				return err
			}
			f = &orderly.Refund{
				ID: id, OrderID: cur.ID, PaymentID: paymentID, Amount: p.Amount, Currency: cur.Currency,
				Items: items, Restock: p.Restock, Reason: p.Reason, State: orderly.RefundRequested, CreatedAt: now,
				Metadata: p.Metadata,
			}
			if f.Items == nil {
				f.Items = []orderly.RefundItem{}
			}
			if err := tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f, IdempotencyKey: p.IdempotencyKey, RequestHash: hash}); err != nil {
				return err
			}
			if after.RefundedAmount == after.Amount && after.State != orderly.StateRefunding {
				changed, err := s.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
					IDs: []string{cur.ID}, From: after.State, Event: orderly.EventRefund, Now: now,
					Cause: "refund " + f.ID, Actor: cmp.Or(p.Actor, "merchant"), TraceID: p.TraceID,
				}, nil)
				if err != nil {
					return err
				} else if len(changed) != 1 {
					return orderly.Errorf(orderly.ECONFLICT, "order %s changed concurrently; retry", cur.ID)
				}
			}
			m, err := outbox.NewMessage(orderly.TopicRefundExecute, cur.ID, RefundRef(f), now)
			if err != nil {
				return err
			}
			created = true
			return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m})
		})
		if p.IdempotencyKey == "" || orderly.ErrorCode(err) != orderly.ECONFLICT {
			break
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("refund order %s: %w", p.OrderID, err)
	}
	if created {
		s.cfg.Signals.OutboxWritten()
	}
	return f, created, nil
}

// RefundRef returns the outbox payload that names refund f.
func RefundRef(f *orderly.Refund) orderly.RefundRef {
	return orderly.RefundRef{RefundID: f.ID, OrderID: f.OrderID, PaymentID: f.PaymentID, Amount: f.Amount, Currency: f.Currency,
		Metadata: f.Metadata}
}

// capturedPayment returns the id of the order's captured payment (the succeeded one that
// paid it; the order's current attempt when several exist).
func capturedPayment(ctx context.Context, tx store.Tx, o *orderly.Order) (string, error) {
	payments, err := tx.PaymentList(ctx, o.ID)
	if err != nil {
		return "", err
	}
	id := ""
	for _, pm := range payments {
		if pm.State == orderly.PaymentSucceeded && (id == "" || pm.ID == o.CurrentPaymentID) {
			id = pm.ID
		}
	}
	if id == "" {
		return "", fmt.Errorf("order %s is %s but has no succeeded payment", o.ID, o.State)
	}
	return id, nil
}

// refundItems counts items (sorted by SKU, the lock order of stock rows) against the
// units the order bought; stock does not move (RestockRefund does, on confirmation).
// Errors: EREFUNDITEMS.
func refundItems(ctx context.Context, tx store.Tx, orderID string, items []orderly.RefundItem) error {
	for _, it := range items {
		ok, err := tx.ReservationRefund(ctx, &store.ReservationRefundParams{OrderID: orderID, SKU: it.SKU, Refunded: it.Quantity})
		if err != nil {
			return err
		} else if ok {
			continue
		}
		rs, err := tx.ReservationList(ctx, orderID)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.SKU == it.SKU && r.State == orderly.ReservationCommitted {
				return orderly.Errorf(orderly.EREFUNDITEMS, "order %s bought %d of sku %s; %d were refunded already, %d more cannot be",
					orderID, r.Quantity, it.SKU, r.Refunded, it.Quantity)
			}
		}
		return orderly.Errorf(orderly.EREFUNDITEMS, "order %s bought no units of sku %s", orderID, it.SKU)
	}
	return nil
}

// RestockRefunds puts back in stock the units of the refunds fs that ask for a restock
// (sold → available): the step of a confirmation, in its transaction, after its other
// writes. The stock rows are taken in SKU order across all of fs (then by order id), the
// lock order of stock rows in every transaction (creates, closes, payments), so that a
// batch of confirmations cannot deadlock with them. A refund requested before restocks
// waited for the confirmation had restocked its units already: its reservation's guard
// (restocked <= refunded) refuses a second restock and the units are left as they are.
// Errors: the store's.
func RestockRefunds(ctx context.Context, tx store.Tx, fs ...*orderly.Refund) error {
	type unit struct {
		f  *orderly.Refund
		it orderly.RefundItem
	}
	var units []unit
	for _, f := range fs {
		if f.Restock {
			for _, it := range f.Items {
				units = append(units, unit{f, it})
			}
		}
	}
	slices.SortStableFunc(units, func(a, b unit) int {
		return cmp.Or(strings.Compare(a.it.SKU, b.it.SKU), strings.Compare(a.f.OrderID, b.f.OrderID))
	})
	for _, u := range units {
		if _, err := tx.ReservationRefund(ctx, &store.ReservationRefundParams{OrderID: u.f.OrderID, SKU: u.it.SKU, Restock: u.it.Quantity}); err != nil {
			return fmt.Errorf("restock %d of sku %s for refund %s: %w", u.it.Quantity, u.it.SKU, u.f.ID, err)
		}
	}
	return nil
}

// UnrefundItems gives back the unit counts of refund f, which did not return money (the
// gateway refused it, or failed it after confirming it): its items become refundable again
// and the units it restocked, if any, are taken back from available stock (available →
// sold). restocked says whether f's units went back to stock (confirmed before, or
// requested before restocks waited for the confirmation: then the reservation's guard
// refuses to give back refunded units that are still restocked, and they are taken back
// too). It returns the SKUs whose units could not be taken back because fewer were
// available (sold again meanwhile): their counts stay, for reconciliation to report
// (refund_mismatch). The stock rows are taken in SKU order, the lock order of stock rows.
// Errors: the store's; an error when a guard refuses for another reason.
func UnrefundItems(ctx context.Context, tx store.Tx, f *orderly.Refund, restocked bool) (kept []string, err error) {
	for _, it := range slices.SortedFunc(slices.Values(f.Items), func(a, b orderly.RefundItem) int { return strings.Compare(a.SKU, b.SKU) }) {
		p := &store.ReservationRefundParams{OrderID: f.OrderID, SKU: it.SKU, Refunded: -it.Quantity}
		if restocked && f.Restock {
			p.Restock = -it.Quantity
		}
		ok, err := tx.ReservationRefund(ctx, p)
		if err != nil {
			return kept, err
		}
		if !ok && p.Restock == 0 && f.Restock {
			p.Restock = -it.Quantity // restocked at request (before restocks waited for the confirmation)
			if ok, err = tx.ReservationRefund(ctx, p); err != nil {
				return kept, err
			}
		}
		if ok {
			continue
		}
		if p.Restock == 0 {
			return kept, fmt.Errorf("give back %d refunded units of sku %s of order %s: guard refused", it.Quantity, it.SKU, f.OrderID)
		}
		kept = append(kept, it.SKU)
	}
	return kept, nil
}

// OrderRefunds implements orderly.RefundService.
func (s *Service) OrderRefunds(ctx context.Context, orderID string) (refunds []*orderly.Refund, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.OrderGet(ctx, orderID); err != nil {
			return err
		}
		refunds, err = tx.RefundList(ctx, orderID)
		return err
	})
	if refunds == nil {
		refunds = []*orderly.Refund{}
	}
	return refunds, err
}

// Refund implements orderly.RefundService.
func (s *Service) Refund(ctx context.Context, id string) (f *orderly.Refund, err error) {
	if !ValidID(id) {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "refund %s not found", id)
	}
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		f, err = tx.RefundGet(ctx, id)
		return err
	})
	return f, err
}

// refundPayment is the effect orderly.EffectRefundPayment: for each order that changed, a
// refund of what is left of its captured amount, restocking every unit not refunded yet
// (refundRestInTx), then the flow's refund transition from the new state, when it has one
// (group_failed --refund--> refunding). A repeat finds nothing left and requests nothing.
func refundPayment(ctx context.Context, tx store.Tx, b *EffectBatch) error {
	var refunded []string
	for _, id := range b.IDs {
		octx := b.OrderContext(ctx, id)
		o, err := tx.OrderGet(octx, id)
		if err != nil {
			return err
		}
		f, err := refundRestInTx(octx, tx, o, []orderly.State{b.Transition.To}, b.Params.Cause, b.Params.Now)
		if err != nil {
			return err
		} else if f != nil {
			refunded = append(refunded, id)
		}
	}
	if len(refunded) == 0 || b.Transition.To == orderly.StateRefunding {
		return nil
	}
	if _, err := b.Flow.Transition(b.Transition.To, orderly.EventRefund); err != nil {
		return nil //nolint:nilerr // the flow keeps the order in its state while the refund runs
	}
	changed, err := b.Machine.Transition(ctx, tx, b.Flow, &store.OrdersTransitionParams{
		IDs: refunded, From: b.Transition.To, Event: orderly.EventRefund, Now: b.Params.Now,
		Cause: "full refund: " + b.Params.Cause, Actor: b.Params.Actor, TraceID: b.Params.TraceID,
	}, nil)
	if err != nil {
		return err
	} else if len(changed) != len(refunded) {
		return fmt.Errorf("refund transition: %d of %d orders changed", len(changed), len(refunded))
	}
	return nil
}

// refundRestInTx requests, in tx, a refund of what is left of order o's captured amount:
// the amount is added to refunded_amount (guarded: the order is in one of states and the
// total stays within the amount), every unit bought and not refunded yet is counted as
// refunded (restocked when the gateway confirms the refund), and the refund row
// (requested, restock) and its refund.execute message are written. It returns nil, nil
// when nothing is left to refund.
func refundRestInTx(ctx context.Context, tx store.Tx, o *orderly.Order, states []orderly.State, reason string, now time.Time) (*orderly.Refund, error) {
	rest := o.Amount - o.RefundedAmount
	if rest <= 0 {
		return nil, nil
	}
	paymentID, err := capturedPayment(ctx, tx, o)
	if err != nil {
		return nil, err
	}
	if ok, err := tx.OrderAddRefunded(ctx, &store.OrderAddRefundedParams{ID: o.ID, Delta: rest, States: states}); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("refund %d of order %s: the refunded amount guard refused (state %s, refunded %d of %d)",
			rest, o.ID, o.State, o.RefundedAmount, o.Amount)
	}
	rs, err := tx.ReservationList(ctx, o.ID)
	if err != nil {
		return nil, err
	}
	items := []orderly.RefundItem{}
	for _, r := range rs { // by SKU: the lock order of stock rows
		if r.State == orderly.ReservationCommitted && r.Quantity > r.Refunded {
			items = append(items, orderly.RefundItem{SKU: r.SKU, Quantity: r.Quantity - r.Refunded})
		}
	}
	if err := refundItems(ctx, tx, o.ID, items); err != nil {
		return nil, err
	}
	id, err := NewID()
	if err != nil {
		return nil, err
	}
	f := &orderly.Refund{
		ID: id, OrderID: o.ID, PaymentID: paymentID, Amount: rest, Currency: o.Currency,
		Items: items, Restock: len(items) > 0, Reason: reason, State: orderly.RefundRequested, CreatedAt: now,
	}
	if err := tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}); err != nil {
		return nil, err
	}
	m, err := outbox.NewMessage(orderly.TopicRefundExecute, o.ID, RefundRef(f), now)
	if err != nil {
		return nil, err
	}
	return f, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m})
}

// refundRest refunds what is left of an order's captured amount (the merchant's refund
// event): a full refund, or the rest after partial ones.
func (s *Service) refundRest(ctx context.Context, id, actor, traceID string) (*orderly.Order, error) {
	o, err := s.Order(ctx, id)
	if err != nil {
		return nil, err
	}
	flow, err := s.cfg.Machine.Flow(o.Flow)
	if err != nil {
		return nil, err
	}
	if err := flow.CheckOrderRoutes(id); err != nil {
		return nil, err
	}
	if states := RefundStates(flow); !slices.Contains(states, o.State) {
		return nil, orderly.Errorf(orderly.EILLEGAL, "order %s is %s; flow %s refunds orders only in %v", o.ID, o.State, flow.Name, states)
	}
	rest := o.Amount - o.RefundedAmount
	if rest <= 0 {
		return nil, orderly.Errorf(orderly.EREFUNDEXCEEDS, "order %s has nothing left to refund: captured %d, refunded or requested %d", o.ID, o.Amount, o.RefundedAmount)
	}
	if _, _, err := s.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: id, Amount: rest, Reason: "refund event", Actor: actor, TraceID: traceID}); err != nil {
		return nil, err
	}
	return s.Order(ctx, id)
}
