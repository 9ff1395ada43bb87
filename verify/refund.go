package verify

import (
	"context"
	"slices"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// loadRefunds indexes refunds by order.
func (c *checker) loadRefunds(ctx context.Context, tx store.Tx) error {
	refunds, err := tx.RefundList(ctx, "")
	if err != nil {
		return err
	}
	for _, f := range refunds {
		c.refundsByOrder[f.OrderID] = append(c.refundsByOrder[f.OrderID], f)
	}
	return nil
}

// succeededRefunds is the money the gateway confirmed it gave back, in minor units.
func succeededRefunds(refunds []*orderly.Refund) int64 {
	var sum int64
	for _, f := range refunds {
		if f.State == orderly.RefundSucceeded {
			sum += f.Amount
		}
	}
	return sum
}

// checkRefunds checks I4 for an order's refunds (the money side, captured − refunded, is in
// checkPayments):
//   - refunds exist only for orders that were paid, each of the order's captured payment and
//     currency; their requested and succeeded amounts add up to the order's refunded_amount,
//     which never exceeds the captured amount;
//   - pay_status says what the gateway confirmed: paid with none, partially_refunded with
//     part, refunded (and state refunded) with all of it;
//   - per SKU, the units of refunds not failed are the reservation's refunded count and the
//     units of succeeded restocking refunds its restocked count (units go back to stock when
//     the gateway confirms their refund), restocked never beyond refunded nor refunded beyond
//     the units bought: a unit restocked without a refund counting it is a phantom unit in
//     stock (a refused refund that kept its restock).
func (c *checker) checkRefunds(o *orderly.Order, payments []*orderly.Payment, refunds []*orderly.Refund, reservations []*orderly.Reservation) {
	if len(refunds) == 0 && o.RefundedAmount == 0 {
		return
	}
	if !paidLike(o.State) && o.State != orderly.StateRefunding && o.State != orderly.StateRefunded {
		c.violate("I4", "order %s is %s but has %d refunds (refunded_amount %d)", o.ID, o.State, len(refunds), o.RefundedAmount)
		return
	}
	var reserved, succeeded int64
	refundedUnits, restockedUnits := map[string]int64{}, map[string]int64{}
	for _, f := range refunds {
		i := slices.IndexFunc(payments, func(p *orderly.Payment) bool { return p.ID == f.PaymentID })
		switch {
		case i < 0:
			c.violate("I4", "order %s refund %s is of payment %s, which is not the order's", o.ID, f.ID, f.PaymentID)
		case payments[i].State != orderly.PaymentSucceeded:
			c.violate("I4", "order %s refund %s is of payment %s, which is %s, not the captured payment", o.ID, f.ID, f.PaymentID, payments[i].State)
		}
		if f.Currency != o.Currency {
			c.violate("I4", "order %s is in %s but its refund %s is in %s", o.ID, o.Currency, f.ID, f.Currency)
		}
		if f.State != orderly.RefundFailed {
			reserved += f.Amount
			for _, it := range f.Items {
				refundedUnits[it.SKU] += it.Quantity
			}
		}
		if f.State == orderly.RefundSucceeded {
			succeeded += f.Amount
		}
		if f.Restock && f.State == orderly.RefundSucceeded {
			for _, it := range f.Items {
				restockedUnits[it.SKU] += it.Quantity
			}
		}
	}
	if reserved != o.RefundedAmount {
		c.violate("I4", "order %s refunded_amount is %d but its refunds not failed sum to %d", o.ID, o.RefundedAmount, reserved)
	}
	if reserved > o.Amount {
		c.violate("I4", "order %s refunds %d of a captured %d %s", o.ID, reserved, o.Amount, o.Currency)
	}
	var want orderly.PayStatus
	switch {
	case succeeded == 0:
		want = orderly.PayPaid
	case succeeded < o.Amount:
		want = orderly.PayPartiallyRefunded
	default:
		want = orderly.PayRefunded
	}
	if o.PayStatus != want {
		c.violate("I4", "order %s is %s/%s but the gateway confirmed refunds of %d of %d, want pay_status %s",
			o.ID, o.State, o.PayStatus, succeeded, o.Amount, want)
	}
	if (want == orderly.PayRefunded) != (o.State == orderly.StateRefunded) {
		c.violate("I4", "order %s is %s but the gateway confirmed refunds of %d of %d", o.ID, o.State, succeeded, o.Amount)
	}
	bySKU := map[string]*orderly.Reservation{}
	for _, r := range reservations {
		bySKU[r.SKU] = r
	}
	for _, sku := range sortedKeys(bySKU) {
		r := bySKU[sku]
		if r.Refunded != refundedUnits[sku] || r.Restocked != restockedUnits[sku] {
			c.violate("I4", "order %s sku %s: reservation counts %d refunded, %d restocked; its refunds say %d, %d",
				o.ID, sku, r.Refunded, r.Restocked, refundedUnits[sku], restockedUnits[sku])
		}
		if r.Refunded > r.Quantity || r.Restocked > r.Refunded {
			c.violate("I4", "order %s sku %s: %d restocked, %d refunded, %d bought: restocked <= refunded <= bought does not hold",
				o.ID, sku, r.Restocked, r.Refunded, r.Quantity)
		}
	}
	for _, sku := range sortedKeys(refundedUnits) {
		if _, ok := bySKU[sku]; !ok {
			c.violate("I4", "order %s refunds %d units of sku %s, which it did not buy", o.ID, refundedUnits[sku], sku)
		}
	}
}
