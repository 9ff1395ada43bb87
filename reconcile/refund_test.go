package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

// paid creates an order of quantity units of SKU-R at 500 and pays it.
func paid(t *testing.T, f *fixture, user string, quantity int64) *orderly.Order {
	t.Helper()
	ctx := context.Background()
	o := f.e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: user, SKU: "SKU-R", Quantity: quantity, UnitPrice: 500})
	p, err := f.e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := f.e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: "txn-" + user,
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: f.e.Clock.Now()}); err != nil || !res.Applied {
		t.Fatalf("pay = %+v, %v", res, err)
	}
	return o
}

// TestRefundMismatch: orders whose refunds and figures agree give no finding; the two
// faults of the fresh-user trial are found, by the full scan and by the per-order check,
// as operator tasks: units restocked that no succeeded refund names (a refused refund kept
// its restock: stock conservation holds, so stock_mismatch cannot see it), and an order
// refunded whose confirmed refund the provider failed later (money owed to the buyer).
func TestRefundMismatch(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := setup(t, dialect)
			f.e.SetStock(t, "SKU-R", 10)
			restocked := paid(t, f, "u-restock", 2)
			refunded := paid(t, f, "u-refunded", 1)
			for _, p := range []*orderly.CreateRefundParams{
				{OrderID: restocked.ID, Amount: 500, Items: []orderly.RefundItem{{SKU: "SKU-R", Quantity: 1}}, Restock: true},
				{OrderID: refunded.ID, Amount: 500},
			} {
				if _, _, err := f.e.Orders.CreateRefund(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			f.e.Drain(t)
			rep, err := f.r.Run(ctx, reconcile.RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Findings) != 0 {
				t.Fatalf("consistent refunds: findings %v, want none", kinds(rep.Findings))
			}

			// The trial's figures: the second unit back in stock, no refund counting it.
			f.exec(t, `UPDATE reservations SET restocked = 2 WHERE order_id = '%s'`, restocked.ID)
			f.exec(t, `UPDATE stock SET available = available + 1, sold = sold - 1 WHERE sku = 'SKU-R'`)
			// The refund of a refunded order failed after it was confirmed.
			f.exec(t, `UPDATE refunds SET state = 'failed', fail_reason = 'reversed' WHERE order_id = '%s'`, refunded.ID)

			rep, err = f.r.Run(ctx, reconcile.RunOptions{Repair: true, By: reconcile.Actor{Operator: "reconcile"}})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"refund_mismatch " + refunded.ID + " repaired=false",
				"refund_mismatch " + restocked.ID + "SKU-R repaired=false",
			}
			slices.Sort(want)
			if got := kinds(rep.Findings); !slices.Equal(got, want) {
				t.Fatalf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			details := map[string]string{}
			for _, fd := range rep.Findings {
				details[fd.OrderID] = fd.Detail
			}
			for id, want := range map[string]string{
				refunded.ID:  "refunded_amount is 500 but its refunds not failed sum to 0; it reads refunded/refunded but the provider confirms refunds of 0 of 500 USD: 500 owed to the buyer",
				restocked.ID: "reservation counts 1 refunded and 2 restocked of 2 bought; its refunds say 1 refunded, 1 restocked",
			} {
				if details[id] != want {
					t.Errorf("detail of %s: %q, want %q", id, details[id], want)
				}
			}
			if g := f.gauge(t, reconcile.KindRefundMismatch); g != 2 {
				t.Errorf("orderly_reconcile_findings{kind=refund_mismatch} = %v, want 2", g)
			}
			for _, id := range []string{restocked.ID, refunded.ID} {
				fs, err := f.r.CheckOrder(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if len(fs) != 1 || fs[0].Kind != reconcile.KindRefundMismatch || fs[0].Detail != details[id] {
					t.Errorf("CheckOrder(%s) = %v, want the scan's finding", id, kinds(fs))
				}
			}
		})
	}
}

// TestRefundStuck: a refund the provider accepted and never confirmed (still requested,
// provider_status PROCESSING) is a refund_stuck finding once it is older than
// Config.RefundStuckAfter (24 h by default), with the provider's state and its age, by the
// full scan, by the per-order check and in the saved report; a refund the provider never
// answered, or a younger one, is not; nothing is repaired (an operator task).
func TestRefundStuck(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := setup(t, dialect)
			f.e.SetStock(t, "SKU-R", 10)
			stuck, unanswered := paid(t, f, "u-stuck", 1), paid(t, f, "u-unanswered", 1)
			var ids []string
			for _, o := range []*orderly.Order{stuck, unanswered} {
				r, _, err := f.e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 500})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, r.ID)
			}
			if err := f.e.Store.InTx(ctx, func(tx store.Tx) error {
				_, err := tx.RefundSetProvider(ctx, ids[0], "re_stuck", "PROCESSING")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			stuckOnes := func() []*reconcile.Finding {
				t.Helper()
				rep, err := f.r.Run(ctx, reconcile.RunOptions{Repair: true})
				if err != nil {
					t.Fatal(err)
				}
				var out []*reconcile.Finding
				for _, fd := range rep.Findings {
					if fd.Kind == reconcile.KindRefundStuck {
						out = append(out, fd)
					}
				}
				return out
			}
			f.e.Clock.Advance(23 * time.Hour)
			if fs := stuckOnes(); len(fs) != 0 {
				t.Fatalf("after 23 h: %v, want no refund_stuck", kinds(fs))
			}
			f.e.Clock.Advance(2 * time.Hour)
			fs := stuckOnes()
			if len(fs) != 1 || fs[0].OrderID != stuck.ID || fs[0].Target != ids[0] || fs[0].Repaired ||
				!strings.Contains(fs[0].Detail, `the provider says "PROCESSING"; created 25h0m0s ago`) ||
				!strings.Contains(fs[0].Detail, `provider refund "re_stuck"`) {
				t.Fatalf("after 25 h: %+v, want one unrepaired refund_stuck of %s saying PROCESSING, 25h0m0s", fs, ids[0])
			}
			if got := f.gauge(t, reconcile.KindRefundStuck); got != 1 {
				t.Errorf("orderly_reconcile_findings{kind=refund_stuck} = %v, want 1", got)
			}
			// The per-order check (its undelivered messages are outbox_stuck by now: no relay
			// runs here).
			stuckIn := func(fs []*reconcile.Finding) (n int) {
				for _, fd := range fs {
					if fd.Kind == reconcile.KindRefundStuck && fd.Target == ids[0] {
						n++
					}
				}
				return n
			}
			if byOrder, err := f.r.CheckOrder(ctx, stuck.ID); err != nil || stuckIn(byOrder) != 1 {
				t.Fatalf("CheckOrder = %v, %v; want one refund_stuck", kinds(byOrder), err)
			}
			if fs, err := f.r.CheckOrder(ctx, unanswered.ID); err != nil || slices.ContainsFunc(fs, func(fd *reconcile.Finding) bool {
				return fd.Kind == reconcile.KindRefundStuck
			}) {
				t.Fatalf("CheckOrder of the unanswered refund's order = %v, %v; want no refund_stuck", kinds(fs), err)
			}
		})
	}
}
