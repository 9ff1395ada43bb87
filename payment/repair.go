package payment

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// RefundUnkept requests, in tx, the refund of payment paymentID when it succeeded for an
// order that does not keep it (the order reads closed): the repair of reconciliation for a
// payment that I2 says must be refunded. It takes the same path as a success that arrives
// after the close (applySuccess): the payment moves succeeded → refund_pending (guarded)
// and a payment.refund message asks the gateway for the refund, idempotent per payment
// (PaymentRefundKey); its handler marks it refunded. It reports whether it requested the
// refund: false, changing nothing, when the payment is no longer succeeded or its order is
// not closed (a repeat, or a race with the normal path). The caller wakes the relay after
// the commit. Errors: ENOTFOUND for an unknown payment or order; driver errors.
func (s *Service) RefundUnkept(ctx context.Context, tx store.Tx, paymentID string, now time.Time) (bool, error) {
	p, err := tx.PaymentGet(ctx, paymentID)
	if err != nil {
		return false, err
	}
	if p.State != orderly.PaymentSucceeded {
		return false, nil
	}
	o, err := tx.OrderGet(ctx, p.OrderID)
	if err != nil {
		return false, err
	}
	if o.State != orderly.StateClosed {
		return false, nil
	}
	ok, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{
		ID: p.ID, From: []orderly.PaymentState{orderly.PaymentSucceeded}, To: orderly.PaymentRefundPending,
	})
	if err != nil || !ok {
		return false, err
	}
	if err := requestRefund(ctx, tx, p.ID, o.ID, p.Amount, p.ChannelTxnID, now); err != nil {
		return false, err
	}
	s.cfg.Logger.InfoContext(ctx, "reconciliation: refunding a payment kept by a closed order",
		"payment_id", p.ID, "order_id", o.ID, "amount", p.Amount)
	return true, nil
}
