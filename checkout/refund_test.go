package checkout_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// TestWalletRefund: a wallet-paid order of 1200 refunded 500, then the rest 700, by the
// merchant through the refund path (order.CreateRefund → refund.execute on the outbox):
// each refund credits the buyer's wallet back once, under the key "refund:<refund id>",
// also when its message is delivered again; the order ends refunded, the buyer's balance
// is whole and the platform's back to 0.
func TestWalletRefund(t *testing.T) {
	t.Parallel()
	b := setup(t, sqliteConfig(t), true, 5, 10_000)
	ctx := t.Context()
	rec, out := post(t, b.e, `{"user_id":"buyer-1","currency":"USD","payment_method":"wallet","items":[{"sku":"sku-1","quantity":1,"unit_price":1200}]}`)
	if rec.Code != http.StatusCreated || out["state"] != "paid" || out["amount"] != float64(1200) {
		t.Fatalf("checkout: %d %s", rec.Code, rec.Body)
	}
	o, err := b.e.Orders().Order(ctx, out["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	refund := func(amount int64) *orderly.Refund {
		t.Helper()
		r, _, err := b.e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: amount, Actor: "merchant"})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			rs, err := b.e.Orders().OrderRefunds(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range rs {
				if x.ID == r.ID && x.State == orderly.RefundSucceeded {
					return x
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("refund %s of %d not succeeded after a minute: %+v", r.ID, amount, rs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := refund(500)
	if s := b.read(t); s.balance != 10_000-1200+500 || s.platform != 700 {
		t.Fatalf("after a refund of 500: balance %d platform %d, want 9300 and 700", s.balance, s.platform)
	}
	// The same message delivered again (a crash between the call and the commit): nothing more.
	payload, _ := json.Marshal(&orderly.RefundRef{RefundID: first.ID, OrderID: o.ID, PaymentID: first.PaymentID, Amount: 500, Currency: "USD"})
	for range 2 {
		if err := b.e.Payments().RefundExecuteHandler().Call(ctx, &orderly.Message{Topic: "refund.execute", Payload: payload}); err != nil {
			t.Fatalf("delivered again: %v", err)
		}
	}
	// The wallet refund itself asked again under the refund's key (a redelivery that read
	// the refund still requested, racing its commit): a replay, nothing moves.
	pays, err := b.e.Payments().OrderPayments(ctx, o.ID)
	if err != nil || len(pays) != 1 {
		t.Fatalf("payments %+v, %v", pays, err)
	}
	if _, err := b.e.Wallets().Refund(ctx, &orderly.WalletRefundParams{TransferID: strings.TrimPrefix(pays[0].ChannelTxnID, "wallet:"),
		Amount: 500, IdempotencyKey: "refund:" + first.ID}); err != nil {
		t.Fatalf("the wallet refund asked again: %v", err)
	}
	if s := b.read(t); s.balance != 9_300 || s.platform != 700 {
		t.Fatalf("after the message was delivered again: balance %d platform %d, want 9300 and 700", s.balance, s.platform)
	}
	second := refund(700)
	if s := b.read(t); s.balance != 10_000 || s.platform != 0 {
		t.Fatalf("after the full refund: balance %d platform %d, want 10000 and 0", s.balance, s.platform)
	}
	for _, r := range []*orderly.Refund{first, second} {
		if err := b.e.Store().Read(ctx, func(tx store.Tx) error {
			tr, err := tx.WalletTransferByKey(ctx, "refund:"+r.ID)
			if err == nil && (tr.Kind != orderly.TransferRefund || tr.Amount != r.Amount) {
				t.Errorf("wallet transfer of refund %s: %+v, want a refund of %d", r.ID, tr, r.Amount)
			}
			return err
		}); err != nil {
			t.Fatalf("wallet transfer of refund %s: %v", r.ID, err)
		}
	}
	if o, err = b.e.Orders().Order(ctx, o.ID); err != nil || o.PayStatus != orderly.PayRefunded {
		t.Fatalf("order %+v, %v; want pay_status refunded", o, err)
	}
}
