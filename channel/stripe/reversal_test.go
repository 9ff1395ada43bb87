package stripe_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// TestRefundFailedAfterSucceeded: Stripe fails a refund it had confirmed (a signed
// refund.updated with status failed after succeeded; the bank returned it). The refund
// used to stay succeeded with an error log only. Now, for an order that may still be
// refunded, the refund becomes failed, the order's amount and items are refundable again,
// the unit it restocked is taken back, pay_status goes back to paid (audit event
// refund_reversed), refund.reversed is written and the reversal counted; once the order is
// refunded (terminal), the money owed is a reconciliation finding.
func TestRefundFailedAfterSucceeded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	if _, err := b.e.Orders().SetStock(ctx, "SKU-REV", 10); err != nil {
		t.Fatal(err)
	}
	o, _, err := b.e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u-rev", Currency: "USD",
		Items: []orderly.Item{{SKU: "SKU-REV", Quantity: 2, UnitPrice: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := b.fake.Pay(p.ID)
	if s := send(t, b, ev); s != http.StatusOK {
		t.Fatalf("payment webhook: %d", s)
	}
	waitFor(t, "paid", func() bool { return b.get(t, o.ID).State == orderly.StatePaid })

	type figures struct {
		available, sold, refunded, restocked int64
	}
	stock := func() figures {
		var got figures
		if err := b.e.Store().Read(ctx, func(tx store.Tx) error {
			st, err := tx.StockGet(ctx, "SKU-REV")
			if err != nil {
				return err
			}
			got.available, got.sold = st.Available, st.Sold
			rs, err := tx.ReservationList(ctx, o.ID)
			if len(rs) == 1 {
				got.refunded, got.restocked = rs[0].Refunded, rs[0].Restocked
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	refundState := func(id string) *orderly.Refund {
		fs, err := b.e.Orders().OrderRefunds(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.ID == id {
				return f
			}
		}
		t.Fatalf("no refund %s", id)
		return nil
	}

	f, _, err := b.e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 500,
		Items: []orderly.RefundItem{{SKU: "SKU-REV", Quantity: 1}}, Restock: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refund confirmed", func() bool { return refundState(f.ID).State == orderly.RefundSucceeded })
	if got := stock(); got != (figures{available: 9, sold: 1, refunded: 1, restocked: 1}) {
		t.Fatalf("after the refund: %+v, want 9 available, 1 sold, 1 refunded and restocked", got)
	}

	failed, ok := b.fake.FailRefund(stripe.MetadataRefundID, f.ID, "lost_or_stolen_card")
	if !ok {
		t.Fatal("no refund at the imitation")
	}
	for range 2 { // the same event twice: reversed once
		if s := send(t, b, failed); s != http.StatusOK {
			t.Fatalf("refund.updated failed: %d", s)
		}
	}
	if got := refundState(f.ID); got.State != orderly.RefundFailed || got.FailReason != "reversed: stripe failed the refund after confirming it" {
		t.Fatalf("refund %s (%q), want failed as reversed", got.State, got.FailReason)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid || got.RefundedAmount != 0 {
		t.Fatalf("order %s/%s refunded %d, want paid/paid 0", got.State, got.PayStatus, got.RefundedAmount)
	}
	if got := stock(); got != (figures{available: 8, sold: 2}) {
		t.Fatalf("after the reversal: %+v, want 8 available, 2 sold, nothing refunded or restocked", got)
	}
	trail, err := b.e.Orders().OrderHistory(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := trail[len(trail)-1]; last.Event != orderly.EventRefundReversed || last.PayStatusFrom != orderly.PayPartiallyRefunded ||
		last.PayStatusTo != orderly.PayPaid {
		t.Fatalf("last audit row %+v, want refund_reversed partially_refunded → paid", last)
	}
	if n := reversedEvents(t, b, o.ID); n != 1 {
		t.Fatalf("%d refund.reversed messages, want 1", n)
	}
	if n := testutil.ToFloat64(b.e.Metrics().RefundReversals.WithLabelValues("stripe", "given_back")); n != 1 {
		t.Fatalf("orderly_refund_reversals_total{stripe,given_back} = %v, want 1", n)
	}
	rep, err := verify.Check(ctx, b.e.Store(), verify.Options{})
	if err != nil || !rep.OK() {
		t.Fatalf("verify after the reversal: %v, %v", rep, err)
	}

	// Refundable again: the whole order, both units; then Stripe fails that refund too,
	// after the order was refunded.
	full, _, err := b.e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000,
		Items: []orderly.RefundItem{{SKU: "SKU-REV", Quantity: 2}}, Restock: true})
	if err != nil {
		t.Fatalf("refund again after the reversal: %v", err)
	}
	waitFor(t, "order refunded", func() bool { return b.get(t, o.ID).State == orderly.StateRefunded })
	if got := stock(); got != (figures{available: 10, sold: 0, refunded: 2, restocked: 2}) {
		t.Fatalf("after the full refund: %+v, want 10 available, 2 refunded and restocked", got)
	}
	failed, _ = b.fake.FailRefund(stripe.MetadataRefundID, full.ID, "expired_or_canceled_card")
	if s := send(t, b, failed); s != http.StatusOK {
		t.Fatalf("refund.updated failed: %d", s)
	}
	if got := refundState(full.ID); got.State != orderly.RefundFailed {
		t.Fatalf("full refund %s, want failed", got.State)
	}
	if got := b.get(t, o.ID); got.State != orderly.StateRefunded || got.PayStatus != orderly.PayRefunded || got.RefundedAmount != 1000 {
		t.Fatalf("order %s/%s refunded %d, want refunded/refunded 1000 (terminal)", got.State, got.PayStatus, got.RefundedAmount)
	}
	if n := testutil.ToFloat64(b.e.Metrics().RefundReversals.WithLabelValues("stripe", "operator_task")); n != 1 {
		t.Fatalf("orderly_refund_reversals_total{stripe,operator_task} = %v, want 1", n)
	}
	fs, err := b.e.Reconciler().CheckOrder(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	var owed []string
	for _, fd := range fs {
		if fd.Kind == reconcile.KindRefundMismatch && fd.SKU == "" {
			owed = append(owed, fd.Detail)
		}
	}
	want := "refunded_amount is 1000 but its refunds not failed sum to 0; it reads refunded/refunded but the provider confirms refunds of 0 of 1000 USD: 1000 owed to the buyer"
	if len(owed) != 1 || owed[0] != want {
		t.Fatalf("reconciliation of the order: %+v, want the money owed: %q", fs, want)
	}
}

// reversedEvents counts the refund.reversed messages of an order, in any state.
func reversedEvents(t *testing.T, b *bundle, orderID string) int {
	t.Helper()
	n := 0
	ctx := context.WithoutCancel(t.Context())
	if err := b.e.Store().Read(ctx, func(tx store.Tx) error {
		for _, state := range []string{orderly.MessagePending, orderly.MessageDelivered, orderly.MessageDead} {
			msgs, err := tx.OutboxList(ctx, state, 1000)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if m.Topic == orderly.TopicRefundReversed && m.Key == orderID {
					n++
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
