package checkout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/wallet"
)

// Name is the saga definition's name.
const Name = "wallet_checkout"

// Step names of the definition (part of every idempotency key: never rename them).
const (
	StepOrder  = "order"
	StepStock  = "stock"
	StepCoupon = "coupon"
	StepPay    = "pay"
)

// Channel is the payments.channel of a wallet payment; its channel_txn_id is
// "wallet:<transfer id>" of the debit.
const Channel = "wallet"

// Step timing of the definition: each attempt may take StepTimeout; a transient failure is
// retried after 50 ms doubling up to 2 s (±50 %) until StepDeadline after the step's first
// attempt; compensations are retried the same way, MaxCompensationAttempts times before
// the saga is stuck.
const (
	StepTimeout             = 5 * time.Second
	StepDeadline            = 30 * time.Second
	MaxCompensationAttempts = 20
)

// Deps are what the steps use.
type Deps struct {
	Orders  *order.Service
	Wallets *wallet.Service
}

// input is the saga's input: the order as requested.
type input struct {
	Order          orderly.CreateOrderParams `json:"order"`
	IdempotencyKey string                    `json:"idempotency_key,omitempty"`
	Actor          string                    `json:"actor,omitempty"`
	TraceID        string                    `json:"trace_id,omitempty"`
}

// Definition returns the wallet checkout saga (see the package documentation). It returns
// an error when a dependency is missing.
func Definition(d Deps) (saga.Definition, error) {
	if d.Orders == nil || d.Wallets == nil {
		return saga.Definition{}, errors.New("checkout: Deps.Orders and Deps.Wallets are required")
	}
	s := &steps{Deps: d}
	retry := saga.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaxInterval: 2 * time.Second, Deadline: StepDeadline}
	step := func(name string, action, comp func(ctx context.Context, tx store.Tx, c *saga.Call) error) saga.Step {
		st := saga.Step{Name: name, Action: saga.LocalTx(action), Timeout: StepTimeout, Retry: retry,
			MaxCompensationAttempts: MaxCompensationAttempts}
		if comp != nil {
			st.Compensation = saga.LocalTx(comp)
		}
		return st
	}
	return saga.Definition{Name: Name, Steps: []saga.Step{
		step(StepOrder, s.createOrder, s.closeOrder),
		step(StepStock, s.reserve, s.release),
		step(StepCoupon, s.freeze, s.releaseCoupon),
		step(StepPay, s.pay, s.creditBack),
	}}, nil
}

type steps struct{ Deps }

// business marks the domain errors that no retry changes as business failures.
func business(err error) error {
	switch orderly.ErrorCode(err) {
	case orderly.EINVALID, orderly.EOUTOFSTOCK, orderly.ECOUPONUNAVAIL, orderly.EINSUFFICIENT, orderly.ENOTFOUND,
		orderly.EIDEMPOTENCY, orderly.ENOTPAYABLE, orderly.EILLEGAL:
		return saga.Business(err)
	}
	return err
}

// createOrder writes the order (id = the saga's id) and its creation audit row, without
// stock or coupon (the next steps). The idempotency key was looked up before the saga
// started; a concurrent request with the same key that won the race makes this a business
// failure (EIDEMPOTENCY), and Service.Checkout answers that request's order.
func (s *steps) createOrder(ctx context.Context, tx store.Tx, c *saga.Call) error {
	var in input
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return saga.Business(orderly.Errorf(orderly.EINVALID, "checkout input: %v", err))
	}
	p := in.Order
	p.IdempotencyKey, p.Actor, p.TraceID = in.IdempotencyKey, in.Actor, in.TraceID
	o, created, err := s.Orders.CreateInTx(ctx, tx, &p, &order.CreateOptions{ID: c.SagaID, NoResources: true})
	if err != nil {
		return business(err)
	}
	if !created {
		return saga.Business(orderly.Errorf(orderly.EIDEMPOTENCY, "Idempotency-Key %q was taken by order %s meanwhile", p.IdempotencyKey, o.ID))
	}
	c.Keep(o) // the order as written: the next steps in this transaction need not read it
	return nil
}

// namesCoupon reports whether the checkout's order names a coupon; true when the input
// cannot be read (the order then says).
func namesCoupon(c *saga.Call) bool {
	var in struct {
		Order struct {
			CouponID string `json:"coupon_id"`
		} `json:"order"`
	}
	return json.Unmarshal(c.Input, &in) != nil || in.Order.CouponID != ""
}

// pending reads the checkout's order, and the database clock; a business failure when the
// order is no longer pending_payment (closed by its deadline or by the buyer while a step
// waited). When the order step ran in this transaction the order is the one it wrote
// (saga.Call.Carried), unread: no step changes the order's row before pay, and no other
// transaction can while this one holds it.
func pending(ctx context.Context, tx store.Tx, c *saga.Call) (*orderly.Order, time.Time, error) {
	o, carried := c.Carried().(*orderly.Order)
	if !carried {
		var err error
		if o, err = tx.OrderGet(ctx, c.SagaID); err != nil {
			return nil, time.Time{}, business(err)
		}
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if o.State != orderly.StatePendingPayment {
		return nil, now, saga.Business(orderly.Errorf(orderly.ENOTPAYABLE, "order %s is %s (%s)", o.ID, o.State, o.CloseReason))
	}
	return o, now, nil
}

func (s *steps) reserve(ctx context.Context, tx store.Tx, c *saga.Call) error {
	o, now, err := pending(ctx, tx, c)
	if err != nil {
		return err
	}
	return business(order.Reserve(ctx, tx, o, now))
}

// release releases the order's held reservations (guarded: those already released or
// committed stay as they are; none is a null compensation).
func (s *steps) release(ctx context.Context, tx store.Tx, c *saga.Call) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.ReservationsReleaseMany(ctx, []string{c.SagaID}, now)
	return err
}

// freeze freezes the order's coupon; an order without one (the saga's input says so)
// reads nothing.
func (s *steps) freeze(ctx context.Context, tx store.Tx, c *saga.Call) error {
	if !namesCoupon(c) {
		return nil
	}
	o, now, err := pending(ctx, tx, c)
	if err != nil {
		return err
	}
	return business(order.FreezeCoupon(ctx, tx, o, now))
}

// releaseCoupon releases the coupon the order froze, if it is still frozen for it.
func (s *steps) releaseCoupon(ctx context.Context, tx store.Tx, c *saga.Call) error {
	if !namesCoupon(c) {
		return nil
	}
	o, err := tx.OrderGet(ctx, c.SagaID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil // null compensation: no order, no coupon
	} else if err != nil {
		return err
	}
	if o.CouponID == "" {
		return nil
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = tx.CouponsRelease(ctx, []orderly.CouponRef{{CouponID: o.CouponID, OrderID: o.ID}}, now)
	return err
}

// creditBack refunds the debit written under the pay action's key, in full, under the
// compensation's key; no such debit is a null compensation. The pay step runs in the
// transaction that records it, so it is compensated only when its outcome stayed unknown
// past its deadline, and then nothing was debited: this is the guard of that rule, and of
// a pay participant that one day runs outside the recording transaction.
func (s *steps) creditBack(ctx context.Context, tx store.Tx, c *saga.Call) error {
	tr, err := tx.WalletTransferByKey(ctx, saga.IdempotencyKey(c.SagaID, StepPay, saga.PhaseAction))
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	_, err = s.Wallets.RefundTx(ctx, tx, &orderly.WalletRefundParams{TransferID: tr.ID, Amount: tr.Amount, IdempotencyKey: c.IdempotencyKey}, now)
	return err
}

// pay takes the order's amount from the buyer's wallet to the platform account and moves
// the order to paid, in one step: the payment is recorded (succeeded, channel "wallet",
// channel_txn_id "wallet:<transfer id>"), the machine's pay transition runs (reservations
// committed, coupon used, order.paid published), and the debit is written last, under the
// operation's key, so that the platform account's row, which every checkout updates, is
// held only from its update to the commit. Past the payment deadline (database clock) the
// order is not payable, as for any payment attempt. A user without a wallet in the
// order's currency, or whose available balance is short, is a business failure
// (EINSUFFICIENT), and the step's writes roll back with its savepoint.
func (s *steps) pay(ctx context.Context, tx store.Tx, c *saga.Call) error {
	o, now, err := pending(ctx, tx, c)
	if err != nil {
		return err
	}
	if !now.Before(o.ExpiresAt) {
		return saga.Business(orderly.Errorf(orderly.ENOTPAYABLE, "the payment deadline of order %s passed", o.ID))
	}
	transferID, err := order.NewID()
	if err != nil {
		return err
	}
	paymentID, err := order.NewID()
	if err != nil {
		return err
	}
	p := &orderly.Payment{ID: paymentID, OrderID: o.ID, Channel: Channel, ChannelTxnID: "wallet:" + transferID, Amount: o.Amount,
		Currency: o.Currency, State: orderly.PaymentSucceeded, CreatedAt: now, SucceededAt: &now}
	if err := tx.PaymentInsert(ctx, p); err != nil {
		return err
	}
	m := s.Orders.Machine()
	flow, err := m.Flow(o.Flow)
	if err != nil {
		return business(err)
	}
	changed, err := m.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
		IDs: []string{o.ID}, From: o.State, Event: orderly.EventPay,
		PayStatusIn:  []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
		SetPayStatus: orderly.PayPaid, SetPaidAt: true, Now: now, Cause: "payment " + p.ID + " (wallet transfer " + transferID + ")", Actor: "checkout",
	}, map[string]string{o.ID: o.CouponID})
	if err != nil {
		return business(err)
	} else if len(changed) != 1 {
		return saga.Business(orderly.Errorf(orderly.ENOTPAYABLE, "order %s changed concurrently and no longer takes a payment", o.ID))
	}
	tr, err := s.Wallets.DebitTx(ctx, tx, transferID, &orderly.WalletMoveParams{UserID: o.UserID, Currency: o.Currency, Amount: o.Amount,
		IdempotencyKey: c.IdempotencyKey}, now)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return saga.Business(orderly.Errorf(orderly.EINSUFFICIENT, "user %s has no wallet in %s: no funds for %d", o.UserID, o.Currency, o.Amount))
	} else if err != nil {
		return business(err)
	} else if tr.ID != transferID {
		return fmt.Errorf("the debit of order %s is transfer %s, written before this attempt", o.ID, tr.ID)
	}
	c.Keep(paidOrder(o, now)) // Service.Checkout's answer, unread (saga.Instance.Kept)
	return nil
}

// paidOrder is o, pending_payment, as the pay transition at now writes it: state paid,
// pay_status paid, paid_at now and its version one more (store.Tx.OrdersTransition).
func paidOrder(o *orderly.Order, now time.Time) *orderly.Order {
	paid := *o
	paid.State, paid.PayStatus, paid.PaidAt, paid.Version = orderly.StatePaid, orderly.PayPaid, &now, o.Version+1
	return &paid
}

// closeOrder closes the order, if it is still pending_payment, through the machine's
// cancel transition with the reason the saga failed for (its reservations and coupon are
// released by the transition's effects, guarded); no order is a null compensation.
func (s *steps) closeOrder(ctx context.Context, tx store.Tx, c *saga.Call) error {
	o, err := tx.OrderGet(ctx, c.SagaID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return nil
	} else if err != nil {
		return err
	}
	if o.State != orderly.StatePendingPayment {
		return nil // closed already (its deadline, the buyer): its close released everything
	}
	reason, err := failure(ctx, tx, c.SagaID)
	if err != nil {
		return err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	m := s.Orders.Machine()
	flow, err := m.Flow(o.Flow)
	if err != nil {
		return err
	}
	_, err = m.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
		IDs: []string{o.ID}, From: o.State, Event: orderly.EventCancel,
		PayStatusIn: []orderly.PayStatus{orderly.PayUnpaid, orderly.PayPaying, orderly.PayFailed},
		Now:         now, CloseReason: reason, Cause: "wallet checkout saga " + c.SagaID + ": " + string(reason), Actor: "checkout",
	}, map[string]string{o.ID: o.CouponID})
	return err // no change: the order changed meanwhile (closed), which is what was wanted
}

// failure reads the saga's log for the action that failed and names the close reason.
func failure(ctx context.Context, tx store.Tx, sagaID string) (orderly.CloseReason, error) {
	log, err := tx.SagaSteps(ctx, sagaID)
	if err != nil {
		return "", err
	}
	for i := len(log) - 1; i >= 0; i-- {
		st := log[i]
		if st.Phase != string(saga.PhaseAction) {
			continue
		}
		if st.Outcome == string(saga.OutcomeBusinessFailure) {
			return reasonOf(codeOf(st.Error)), nil
		}
		if st.Outcome == string(saga.OutcomeUnknown) {
			return orderly.CloseReasonCheckoutFailed, nil
		}
	}
	return orderly.CloseReasonCheckoutFailed, nil
}

// reasonOf is the close reason of a business failure's error code.
func reasonOf(code string) orderly.CloseReason {
	switch code {
	case orderly.EOUTOFSTOCK:
		return orderly.CloseReasonOutOfStock
	case orderly.ECOUPONUNAVAIL:
		return orderly.CloseReasonCouponUnavailable
	case orderly.EINSUFFICIENT:
		return orderly.CloseReasonInsufficientFunds
	}
	return orderly.CloseReasonCheckoutFailed
}
