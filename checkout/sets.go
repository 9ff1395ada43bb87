package checkout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/wallet"
)

// The steps as sets (saga.LocalTxSet): concurrent checkouts joined into one transaction
// (saga.Config.JoinRuns) run each step once for all of them, in a few statements per
// table. A checkout refused by a step writes nothing in it; one that must then be
// compensated makes the batch run member by member (saga.LocalTxSet), so that each ends as
// it would alone. Not the same: every checkout of a set is traced under the set's context
// (the first member's), not its own request's.
// A set runs only in a saga's first run of local steps, where each step after the order
// step takes the order it wrote (saga.Call.Carried); a call without it makes the set fail,
// and the checkouts then run one by one.

// createOrderSet is createOrder of many checkouts (order.Service.CreateSetInTx).
func (s *steps) createOrderSet(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]error, error) {
	errs := make([]error, len(calls))
	var (
		ps  []*orderly.CreateOrderParams
		ids []string
		at  []int
	)
	for i, c := range calls {
		var in input
		if err := json.Unmarshal(c.Input, &in); err != nil {
			errs[i] = saga.Business(orderly.Errorf(orderly.EINVALID, "checkout input: %v", err))
			continue
		}
		p := in.Order
		p.IdempotencyKey, p.Actor, p.TraceID = in.IdempotencyKey, in.Actor, in.TraceID
		ps, ids, at = append(ps, &p), append(ids, c.SagaID), append(at, i)
	}
	if len(ps) == 0 {
		return errs, nil
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, err
	}
	orders, created, oerrs, err := s.Orders.CreateSetInTx(ctx, tx, ps, ids, now)
	if err != nil {
		return nil, err
	}
	for k, i := range at {
		switch {
		case oerrs[k] != nil:
			errs[i] = business(oerrs[k])
		case !created[k]:
			errs[i] = saga.Business(orderly.Errorf(orderly.EIDEMPOTENCY, "Idempotency-Key %q was taken by order %s meanwhile", ps[k].IdempotencyKey, orders[k].ID))
		default:
			calls[i].Keep(orders[k])
		}
	}
	return errs, nil
}

// carriedSet returns the orders the order step kept for calls, and the database clock;
// an error when a call has none (the set then fails and the checkouts run one by one).
// Each order is pending_payment: no other transaction can have changed it.
func carriedSet(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]*orderly.Order, time.Time, error) {
	orders := make([]*orderly.Order, len(calls))
	for i, c := range calls {
		o, ok := c.Carried().(*orderly.Order)
		if !ok {
			return nil, time.Time{}, fmt.Errorf("checkout %s: step %s runs as a set without the order its order step wrote", c.SagaID, c.StepName)
		}
		orders[i] = o
	}
	now, err := tx.Now(ctx)
	return orders, now, err
}

// reserveSet is reserve of many checkouts (order.ReserveSet).
func (s *steps) reserveSet(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]error, error) {
	orders, now, err := carriedSet(ctx, tx, calls)
	if err != nil {
		return nil, err
	}
	errs, err := order.ReserveSet(ctx, tx, orders, now)
	if err != nil {
		return nil, err
	}
	for i := range errs {
		if errs[i] != nil {
			errs[i] = business(errs[i])
		}
	}
	return errs, nil
}

// freezeSet is freeze of many checkouts: one guarded update for each that names a coupon
// (it writes nothing when it refuses), nothing for the others.
func (s *steps) freezeSet(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]error, error) {
	errs := make([]error, len(calls))
	var now time.Time
	for i, c := range calls {
		if !namesCoupon(c) {
			continue
		}
		o, ok := c.Carried().(*orderly.Order)
		if !ok {
			return nil, fmt.Errorf("checkout %s: step %s runs as a set without the order its order step wrote", c.SagaID, c.StepName)
		}
		if now.IsZero() {
			var err error
			if now, err = tx.Now(ctx); err != nil {
				return nil, err
			}
		}
		if err := order.FreezeCoupon(ctx, tx, o, now); orderly.ErrorCode(err) == orderly.EINTERNAL {
			return nil, err
		} else if err != nil {
			errs[i] = business(err)
		}
	}
	return errs, nil
}

// paySet is pay of many checkouts: the debits first (wallet.Service.DebitSetTx: the
// accounts locked in id order, each debit taken if its balance covers it), then, for the
// orders paid, their payments in one statement and one pay transition of them all. A
// checkout past its payment deadline, or whose wallet is short, is refused as pay refuses
// it, and nothing is written for it.
func (s *steps) paySet(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]error, error) {
	orders, now, err := carriedSet(ctx, tx, calls)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(calls))
	var (
		debits []wallet.Debit
		at     []int
	)
	for i, o := range orders {
		if !now.Before(o.ExpiresAt) {
			errs[i] = saga.Business(orderly.Errorf(orderly.ENOTPAYABLE, "the payment deadline of order %s passed", o.ID))
			continue
		}
		id, err := order.NewID()
		if err != nil {
			return nil, err
		}
		debits = append(debits, wallet.Debit{ID: id, Params: &orderly.WalletMoveParams{UserID: o.UserID, Currency: o.Currency,
			Amount: o.Amount, IdempotencyKey: calls[i].IdempotencyKey}})
		at = append(at, i)
	}
	if len(debits) == 0 {
		return errs, nil
	}
	trs, derrs, err := s.Wallets.DebitSetTx(ctx, tx, debits, now)
	if err != nil {
		return nil, err
	}
	var (
		payments []*orderly.Payment
		ids      []string
		causes   = map[string]string{}
		coupons  = map[string]string{}
	)
	for k, i := range at {
		o := orders[i]
		switch {
		case orderly.ErrorCode(derrs[k]) == orderly.ENOTFOUND:
			errs[i] = saga.Business(orderly.Errorf(orderly.EINSUFFICIENT, "user %s has no wallet in %s: no funds for %d", o.UserID, o.Currency, o.Amount))
			continue
		case derrs[k] != nil:
			errs[i] = business(derrs[k])
			continue
		}
		id, err := order.NewID()
		if err != nil {
			return nil, err
		}
		p := &orderly.Payment{ID: id, OrderID: o.ID, Attempt: 1, Channel: Channel, ChannelTxnID: "wallet:" + trs[k].ID, Amount: o.Amount,
			Currency: o.Currency, State: orderly.PaymentSucceeded, CreatedAt: now, SucceededAt: &now}
		payments, ids = append(payments, p), append(ids, o.ID)
		calls[i].Keep(paidOrder(o, now)) // dropped unless the transition below commits
		causes[o.ID] = "payment " + p.ID + " (wallet transfer " + trs[k].ID + ")"
		coupons[o.ID] = o.CouponID
	}
	if len(ids) == 0 {
		return errs, nil
	}
	if err := tx.PaymentsInsertMany(ctx, payments); err != nil {
		return nil, err
	}
	m := s.Orders.Machine()
	flow, err := m.Flow(orderly.FlowStandard)
	if err != nil {
		return nil, err
	}
	changed, err := m.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
		IDs: ids, From: orderly.StatePendingPayment, Event: orderly.EventPay,
		PayStatusIn:  []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
		SetPayStatus: orderly.PayPaid, SetPaidAt: true, Now: now, Causes: causes, Actor: "checkout",
	}, coupons)
	if err != nil {
		return nil, err
	} else if len(changed) != len(ids) {
		return nil, fmt.Errorf("pay %d checkouts: %d orders changed (each was written pending_payment by this transaction)", len(ids), len(changed))
	}
	return errs, nil
}
