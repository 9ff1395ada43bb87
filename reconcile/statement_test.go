package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

// TestStatementRefunds: the refund lines of a statement are compared with our refunds of
// the channel's payments, found by the provider's refund id or by ours. A refund that
// agrees gives nothing (listed by provider ref with status Refunded, or by our id with
// type refund); one of another amount, one of another channel's payment, one unknown, one
// we still read requested, and a succeeded refund the statement leaves out each give one
// finding; a refund listed twice gives one statement_duplicate.
func TestStatementRefunds(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			f := setup(t, dialect)
			e, ctx := f.e, context.Background()
			e.SetStock(t, "SKU-R", 20)
			users := []string{"ok", "idref", "amount", "requested", "theirs", "dup"}
			orders := map[string]*orderly.Order{}
			for _, u := range users {
				orders[u] = paid(t, f, "u-"+u, 1)
			}
			e.Clock.Advance(time.Minute) // the captures fall before the statement's period
			from := e.Clock.Now()
			refunds := map[string]*orderly.Refund{}
			for _, u := range users {
				r, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: orders[u].ID, Amount: 200})
				if err != nil {
					t.Fatal(err)
				}
				refunds[u] = r
			}
			f.e.Drain(t)
			for _, u := range users {
				r := read(t, f, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(ctx, refunds[u].ID) })
				if r.State != orderly.RefundSucceeded || r.Amount != 200 {
					t.Fatalf("refund of %s: %s of %d, want succeeded of 200", u, r.State, r.Amount)
				}
				if u != "idref" { // the provider's refund id, as payment/refund.go records it
					f.exec(t, `UPDATE refunds SET provider_ref = 're_%s' WHERE id = '%s'`, u, r.ID)
				}
			}
			// Confirmed by the provider, never by us: still requested.
			f.exec(t, `UPDATE refunds SET state = 'requested', completed_at = NULL WHERE id = '%s'`, refunds["requested"].ID)
			// A Stripe payment's succeeded refund in the same period.
			stripeOrder := orders["ok"]
			at := from.Add(time.Second)
			if err := e.Store.InTx(ctx, func(tx store.Tx) error {
				if err := tx.PaymentInsert(ctx, &orderly.Payment{ID: "pay-stripe", OrderID: stripeOrder.ID, Channel: "stripe",
					ChannelTxnID: "pi_9", Amount: 500, Currency: stripeOrder.Currency, State: orderly.PaymentSucceeded,
					CreatedAt: at, SucceededAt: &at}); err != nil {
					return err
				}
				return tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: &orderly.Refund{ID: "refund-stripe",
					OrderID: stripeOrder.ID, PaymentID: "pay-stripe", Amount: 100, Currency: stripeOrder.Currency,
					Items: []orderly.RefundItem{}, State: orderly.RefundSucceeded, CreatedAt: at, CompletedAt: &at,
					ProviderRef: "re_stripe"}})
			}); err != nil {
				t.Fatal(err)
			}
			e.Clock.Advance(time.Minute)
			start, end := from.Format(time.RFC3339Nano), e.Clock.Now().Format(time.RFC3339Nano)
			cur := stripeOrder.Currency
			csv := "channel_txn_id,amount,currency,status,time,type\n" +
				fmt.Sprintf("re_ok,200,%s,Refunded,%s,\n", cur, start) +
				fmt.Sprintf("%s,200,%s,succeeded,%s,REFUND\n", refunds["idref"].ID, cur, start) +
				fmt.Sprintf("re_amount,250,%s,refunded,%s,refund\n", cur, start) +
				fmt.Sprintf("re_requested,200,%s,refunded,%s,refund\n", cur, end) +
				fmt.Sprintf("re_dup,200,%s,refund,%s,refund\n", cur, end) +
				fmt.Sprintf("re_dup,200,%s,refund,%s,refund\n", cur, end) +
				fmt.Sprintf("re_stripe,100,%s,refunded,%s,refund\n", cur, end) +
				fmt.Sprintf("re_unknown,300,%s,refunded,%s,refund\n", cur, end) +
				fmt.Sprintf("re_failed,300,%s,failed,%s,refund\n", cur, end)
			lines, err := reconcile.ReadStatement(strings.NewReader(csv))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range lines {
				if !l.Refund {
					t.Errorf("line %s read as a payment, want a refund", l.ChannelTxnID)
				}
			}
			fs, err := f.r.Statement(ctx, "sim", lines)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				got = append(got, fmt.Sprintf("%s %s %s", f.Kind, f.Target, f.OrderID))
			}
			slices.Sort(got)
			want := []string{
				fmt.Sprintf("%s re_amount %s", reconcile.KindStatementAmountMismatch, orders["amount"].ID),
				fmt.Sprintf("%s re_dup ", reconcile.KindStatementDuplicate),
				fmt.Sprintf("%s re_stripe %s", reconcile.KindStatementMissingOurs, stripeOrder.ID),
				fmt.Sprintf("%s re_unknown ", reconcile.KindStatementMissingOurs),
				fmt.Sprintf("%s re_theirs %s", reconcile.KindStatementMissingTheirs, orders["theirs"].ID),
				fmt.Sprintf("%s re_requested %s", reconcile.KindStatementRefundUnconfirmed, orders["requested"].ID),
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, fd := range fs {
				var wantDetail string
				switch fd.Kind {
				case reconcile.KindStatementAmountMismatch:
					wantDetail = fmt.Sprintf("statement 250 %s, refund %s 200 %s", cur, refunds["amount"].ID, cur)
				case reconcile.KindStatementDuplicate:
					wantDetail = "refund re_dup is listed 2 times"
				case reconcile.KindStatementRefundUnconfirmed:
					wantDetail = "refund " + refunds["requested"].ID + " of payment"
				case reconcile.KindStatementMissingTheirs:
					wantDetail = fmt.Sprintf("refund %s (provider ref \"re_theirs\")", refunds["theirs"].ID)
				case reconcile.KindStatementMissingOurs:
					wantDetail = "has no refund here"
					if fd.Target == "re_stripe" {
						wantDetail = "of channel stripe, not sim"
					}
				}
				if !strings.Contains(fd.Detail, wantDetail) {
					t.Errorf("%s %s: detail %q, want it to contain %q", fd.Kind, fd.Target, fd.Detail, wantDetail)
				}
			}

			// Stripe's statement lists its capture and, twice, its refund: one duplicate, and
			// sim's refunds are not Stripe's.
			lines, err = reconcile.ReadStatement(strings.NewReader("channel_txn_id,amount,currency,status,time\n" +
				fmt.Sprintf("pi_9,500,%s,succeeded,%s\n", cur, start) +
				fmt.Sprintf("re_stripe,100,%s,refunded,%s\n", cur, start) + fmt.Sprintf("re_stripe,100,%s,refunded,%s\n", cur, end)))
			if err != nil {
				t.Fatal(err)
			}
			if fs, err := f.r.Statement(ctx, "stripe", lines); err != nil || len(fs) != 1 || fs[0].Kind != reconcile.KindStatementDuplicate {
				t.Fatalf("stripe statement: %v, %v; want one statement_duplicate of re_stripe", details(fs), err)
			}
		})
	}
}

func read[T any](t *testing.T, f *fixture, fn func(tx store.Tx) (T, error)) T {
	t.Helper()
	var v T
	if err := f.e.Store.Read(context.Background(), func(tx store.Tx) (err error) { v, err = fn(tx); return err }); err != nil {
		t.Fatal(err)
	}
	return v
}

func details(fs []*reconcile.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Kind)+": "+f.Detail)
	}
	return out
}
