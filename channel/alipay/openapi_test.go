package alipay_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
)

func TestCreateIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: 1234, Currency: "CNY"}
	qr1, err := b.a.Precreate(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	qr2, err := b.a.Precreate(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	tr, ok := b.srv.Trade(paymentID)
	if !ok || qr1 == "" || qr1 != qr2 || tr.QRCode != qr1 || tr.Total != 1234 || tr.Status != alipay.TradeWaitBuyerPay ||
		tr.OutTradeNo != "019a7f3c5e2b7c119d3e4f5a6b7c8d9e" {
		t.Fatalf("precreate twice: %q %q, trade %+v", qr1, qr2, tr)
	}
	if _, err := b.srv.Pay(paymentID, 0); err != nil {
		t.Fatal(err)
	}
	if qr, err := b.a.Precreate(t.Context(), p); err != nil || qr != "" {
		t.Fatalf("precreate of a paid trade: %q, %v; want \"\", nil", qr, err)
	}
	usd := *p
	usd.Currency = "USD"
	if _, err := b.a.Create(t.Context(), &usd); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("create in USD: %v", err)
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	if err != nil || got.Status != orderly.GatewayPending {
		t.Fatalf("query before precreate: %+v, %v; want pending", got, err)
	}
	tr := b.paid(t, 1999)
	got, err = b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	want := &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: tr.TradeNo, Amount: 1999}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("query after pay: %+v, %v; want %+v", got, err, want)
	}
	b.srv.FailNext("alipay.trade.query", 1)
	if got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query answered 20000: %+v, %v; want a transient error", got, err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("waiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, Amount: 100, Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		if err != nil || got.Status != orderly.GatewayFailed {
			t.Fatalf("cancel: %+v, %v; want failed", got, err)
		}
		if tr, _ := b.srv.Trade(paymentID); tr.Status != alipay.TradeClosed {
			t.Fatalf("trade after close: %s", tr.Status)
		}
		if _, err := b.srv.Pay(paymentID, 100); err == nil {
			t.Fatal("the buyer could pay a closed trade")
		}
	})
	t.Run("already paid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tr := b.paid(t, 100)
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		want := &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: tr.TradeNo, Amount: 100}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("cancel of a paid trade: %+v, %v; want %+v", got, err, want)
		}
		if tr, _ := b.srv.Trade(paymentID); tr.Status != alipay.TradeSuccess {
			t.Fatalf("trade after close: %s", tr.Status)
		}
		calls := b.srv.Calls()
		if n := len(calls); n < 2 || calls[n-2].Method != "alipay.trade.close" || calls[n-1].Method != "alipay.trade.query" {
			t.Fatalf("calls: %+v; want close then query", calls)
		}
	})
	t.Run("never scanned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		if err != nil || got.Status != orderly.GatewayFailed {
			t.Fatalf("cancel: %+v, %v; want failed", got, err)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.paid(t, 100)
		b.srv.FailNext("alipay.trade.close", 1)
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		var ae *alipay.APIError
		if !errors.As(err, &ae) || ae.Code != "20000" || orderly.ErrorCode(err) != orderly.EINTERNAL {
			t.Fatalf("cancel answered 20000: %+v, %v; want a transient *APIError", got, err)
		}
	})
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1000)
	refund := func(key string, amount int64) error {
		_, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: key, PaymentID: paymentID, Amount: amount, Currency: "CNY"})
		return err
	}
	steps := []struct {
		key      string
		amount   int64
		code     string
		refunded int64
		status   string
	}{
		{"r1", 300, "", 300, alipay.TradeSuccess},
		{"r1", 300, "", 300, alipay.TradeSuccess},               // replay: no money moves
		{"r1", 400, orderly.EINVALID, 300, alipay.TradeSuccess}, // same key, other amount: refused
		{"r2", 800, orderly.EINVALID, 300, alipay.TradeSuccess}, // beyond the rest
		{"r2", 700, "", 1000, alipay.TradeClosed},
		{"r2", 700, "", 1000, alipay.TradeClosed}, // replay after the trade closed
		{"r3", 1, orderly.EINVALID, 1000, alipay.TradeClosed},
	}
	for i, s := range steps {
		err := refund(s.key, s.amount)
		tr, _ := b.srv.Trade(paymentID)
		if orderly.ErrorCode(err) != s.code || tr.Refunded != s.refunded || tr.Status != s.status {
			t.Fatalf("step %d refund %s %d: %v, refunded %d %s; want code %q, %d %s",
				i, s.key, s.amount, err, tr.Refunded, tr.Status, s.code, s.refunded, s.status)
		}
	}
	if tr, _ := b.srv.Trade(paymentID); len(tr.Refunds) != 2 || tr.Refunds["r1"].Amount != 300 || tr.Refunds["r2"].Amount != 700 {
		t.Fatalf("refunds: %+v", tr.Refunds)
	}
	if _, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r9", PaymentID: paymentID, Amount: 1, Currency: "JPY"}); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("refund in JPY: %v", err)
	}
	// A refund that names no currency is in the channel's.
	b2 := setup(t)
	b2.paid(t, 100)
	if _, err := b2.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r1", PaymentID: paymentID, Amount: 40}); err != nil {
		t.Fatalf("refund without currency: %v", err)
	}
	if tr, _ := b2.srv.Trade(paymentID); tr.Refunded != 40 {
		t.Fatalf("refunded %d after a refund of 40 without currency", tr.Refunded)
	}
}

// A response signed with another key than the Alipay public key the adapter trusts is
// not believed: the call fails as transient, whatever it says.
func TestResponseSignature(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *alipay.Config) { c.AlipayPublicKey = &alipaytest.MerchantKey().PublicKey })
	if _, err := b.srv.Pay(paymentID, 100); err != nil {
		t.Fatal(err)
	}
	got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	if err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query with a forged answer: %+v, %v; want a transient error", got, err)
	}
	// A request signed with another key is refused by the imitation (isv.invalid-signature).
	b2 := setup(t, func(c *alipay.Config) { c.PrivateKey = alipaytest.AlipayKey() })
	if _, err := b2.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil {
		t.Fatal("a request signed with another key was answered")
	}
}

// The imitation's plays for simulations: a trade closed by Alipay reads failed, and money
// that arrives after a close reads paid.
func TestImitationPlays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.srv.CloseTrade(paymentID, 500); err != nil {
		t.Fatal(err)
	}
	n := mustVerify(t, b, must(b.srv.PaymentNotification(paymentID)))
	if n.Kind != channel.PaymentFailed || n.Amount != 500 {
		t.Fatalf("closed by Alipay: %+v", n)
	}
	if got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err != nil || got.Status != orderly.GatewayFailed {
		t.Fatalf("query of a closed trade: %+v, %v", got, err)
	}
	tr, err := b.srv.PayLate(paymentID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err != nil || got.Status != orderly.GatewaySucceeded || got.ChannelTxnID != tr.TradeNo || got.Amount != 500 {
		t.Fatalf("query after a late payment: %+v, %v", got, err)
	}
	if _, err := b.srv.PayLate(paymentID, 0); err == nil {
		t.Fatal("a paid trade was paid again")
	}
}
