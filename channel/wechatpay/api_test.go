package wechatpay_test

import (
	"crypto/rsa"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/wechatpay"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

func TestNativeOrderIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: 1234, Currency: "CNY"}
	u1, err := b.a.NativeOrder(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := b.a.NativeOrder(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := b.srv.Order(paymentID)
	if !ok || u1 == "" || u1 != u2 || o.CodeURL != u1 || o.Total != 1234 || o.State != "NOTPAY" ||
		o.OutTradeNo != "019a7f3c5e2b7c119d3e4f5a6b7c8d9e" || o.NotifyURL != "https://shop.example/v1/channels/wechat/webhook" {
		t.Fatalf("native twice: %q %q, order %+v", u1, u2, o)
	}
	if _, err := b.srv.Pay(paymentID, 0); err != nil {
		t.Fatal(err)
	}
	if u, err := b.a.NativeOrder(t.Context(), p); err != nil || u != "" {
		t.Fatalf("native order of a paid order: %q, %v; want \"\", nil", u, err)
	}
	noApp := setup(t, func(_ *wechatpaytest.Server, c *wechatpay.Config) { c.AppID = "" })
	if _, err := noApp.a.Create(t.Context(), p); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("create without AppID: %v", err)
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	if err != nil || got.Status != orderly.GatewayPending {
		t.Fatalf("query of an unknown order: %+v, %v; want pending", got, err)
	}
	o := b.paid(t, 1999, 1500)
	got, err = b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	want := &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: o.TransactionID, Amount: 1999}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("query after pay: %+v, %v; want %+v", got, err, want)
	}
	b.srv.FailNext("query", 1)
	if got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query answered 500: %+v, %v; want a transient error", got, err)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	t.Run("not paid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, Amount: 100, Currency: "CNY"}); err != nil {
			t.Fatal(err)
		}
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		if err != nil || got.Status != orderly.GatewayFailed {
			t.Fatalf("cancel: %+v, %v; want failed", got, err)
		}
		if o, _ := b.srv.Order(paymentID); o.State != "CLOSED" {
			t.Fatalf("order after close: %s", o.State)
		}
		if _, err := b.srv.Pay(paymentID, 0); err == nil {
			t.Fatal("the buyer could pay a closed order")
		}
	})
	t.Run("already paid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.paid(t, 100, 0)
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		want := &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: o.TransactionID, Amount: 100}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("cancel of a paid order: %+v, %v; want %+v", got, err, want)
		}
		if o, _ := b.srv.Order(paymentID); o.State != "SUCCESS" {
			t.Fatalf("order after close: %s", o.State)
		}
	})
	t.Run("unknown", func(t *testing.T) {
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
		b.paid(t, 100, 0)
		b.srv.FailNext("close", 1)
		got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID})
		var ae *wechatpay.APIError
		if !errors.As(err, &ae) || ae.Status != 500 || ae.Code != "SYSTEM_ERROR" || orderly.ErrorCode(err) != orderly.EINTERNAL {
			t.Fatalf("cancel answered 500: %+v, %v; want a transient *APIError", got, err)
		}
	})
}

func TestRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1000, 900)
	steps := []struct {
		key      string
		amount   int64
		code     string
		refunded int64
	}{
		{"r1", 300, "", 300},
		{"r1", 300, "", 300},               // replay: no money moves
		{"r1", 400, orderly.EINVALID, 300}, // same key, other amount: refused
		{"r2", 800, orderly.EINVALID, 300}, // NOT_ENOUGH
		{"r2", 700, "", 1000},
		{"r2", 700, "", 1000},
		{"r3", 1, orderly.EINVALID, 1000},
	}
	for i, s := range steps {
		_, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: s.key, PaymentID: paymentID, Amount: s.amount, Currency: "CNY"})
		o, _ := b.srv.Order(paymentID)
		if orderly.ErrorCode(err) != s.code || o.Refunded != s.refunded {
			t.Fatalf("step %d refund %s %d: %v, refunded %d; want code %q, %d", i, s.key, s.amount, err, o.Refunded, s.code, s.refunded)
		}
	}
	replays := 0
	for _, c := range b.srv.Calls() {
		if c.Method == "refund" && c.Replay {
			replays++
		}
	}
	if replays != 3 {
		t.Fatalf("%d replayed refunds, want 3", replays)
	}
	b.srv.FailNext("refund", 1)
	if _, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r4", PaymentID: paymentID, Amount: 1, Currency: "CNY"}); err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("refund answered 500: %v; want a transient error", err)
	}
	unpaid := setup(t)
	if _, err := unpaid.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r1", PaymentID: paymentID, Amount: 1, Currency: "CNY"}); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("refund of an unknown order: %v; want %s", err, orderly.EINVALID)
	}
	if _, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r5", PaymentID: paymentID, Amount: 1, Currency: "USD"}); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("refund in USD: %v", err)
	}
	// A refund that names no currency is in the channel's.
	b2 := setup(t)
	b2.paid(t, 100, 0)
	if _, err := b2.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "r1", PaymentID: paymentID, Amount: 40}); err != nil {
		t.Fatalf("refund without currency: %v", err)
	}
	if o, _ := b2.srv.Order(paymentID); o.Refunded != 40 {
		t.Fatalf("refunded %d after a refund of 40 without currency", o.Refunded)
	}
}

// Answers are believed only when signed by a trusted key within the window.
func TestAnswerVerified(t *testing.T) {
	t.Parallel()
	forged := setup(t, func(_ *wechatpaytest.Server, c *wechatpay.Config) {
		c.PlatformKeys = map[string]*rsa.PublicKey{wechatpaytest.PlatformSerial: &wechatpaytest.MerchantKey().PublicKey}
	})
	if _, err := forged.srv.Pay(paymentID, 100); err != nil {
		t.Fatal(err)
	}
	if got, err := forged.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query with an answer signed by an untrusted key: %+v, %v; want a transient error", got, err)
	}
	late := setup(t, func(_ *wechatpaytest.Server, c *wechatpay.Config) {
		c.Now = func() time.Time { return clock.Add(10 * time.Minute) }
	})
	if got, err := late.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil {
		t.Fatalf("query 10 minutes off the server's clock: %+v; want an error", got)
	}
	otherKey := setup(t, func(_ *wechatpaytest.Server, c *wechatpay.Config) { c.MerchantKey = wechatpaytest.PlatformKey() })
	if _, err := otherKey.a.Query(t.Context(), &orderly.Payment{ID: paymentID}); err == nil {
		t.Fatal("a request signed with another merchant key was answered")
	}
}

// Money that arrives after a close (a simulation's late payment) reads paid.
func TestImitationPayLate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, Amount: 300, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID}); err != nil || got.Status != orderly.GatewayFailed {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	o, err := b.srv.PayLate(paymentID, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.a.Query(t.Context(), &orderly.Payment{ID: paymentID})
	if err != nil || got.Status != orderly.GatewaySucceeded || got.ChannelTxnID != o.TransactionID || got.Amount != 300 {
		t.Fatalf("query after a late payment: %+v, %v", got, err)
	}
}
