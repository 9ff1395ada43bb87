package wechatpay_test

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"reflect"
	"strconv"
	"strings"
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

// Create without a payer is a Native order (its code_url to show, out_trade_no as the
// reference); with an openid a JSAPI order whose parameters are signed with the merchant
// key over "appId\ntimeStamp\nnonceStr\npackage\n".
func TestCreateHandoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	native, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: 500, Currency: "CNY"})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := b.srv.Order(paymentID)
	if native.ProviderRef != "019a7f3c5e2b7c119d3e4f5a6b7c8d9e" || native.NextAction == nil ||
		native.NextAction.Type != orderly.NextActionDisplayQRCode || native.NextAction.QRCode != o.CodeURL ||
		!strings.HasPrefix(o.CodeURL, "weixin://wxpay/bizpayurl?pr=") || o.TradeType != "NATIVE" {
		t.Fatalf("native attempt %+v %+v, order %+v", native, native.NextAction, o)
	}
	const jsapiID, openid = "019a7f3c-5e2b-7c11-9d3e-000000000001", "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"
	att, err := b.a.Create(t.Context(), &orderly.Payment{ID: jsapiID, OrderID: "order-2", Amount: 700, Currency: "CNY", PayerID: openid})
	if err != nil {
		t.Fatal(err)
	}
	jo, _ := b.srv.Order(jsapiID)
	if jo.TradeType != "JSAPI" || jo.OpenID != openid || att.ProviderRef != jo.PrepayID || att.NextAction == nil ||
		att.NextAction.Type != orderly.NextActionWeChatJSAPI || att.NextAction.WeChatJSAPI == nil {
		t.Fatalf("jsapi attempt %+v, order %+v", att, jo)
	}
	j := att.NextAction.WeChatJSAPI
	if j.AppID != wechatpaytest.AppID || j.TimeStamp != strconv.FormatInt(clock.Unix(), 10) || len(j.NonceStr) != 32 ||
		j.Package != "prepay_id="+jo.PrepayID || j.SignType != "RSA" {
		t.Fatalf("JSAPI parameters %+v", j)
	}
	sig, err := base64.StdEncoding.DecodeString(j.PaySign)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(j.AppID + "\n" + j.TimeStamp + "\n" + j.NonceStr + "\n" + j.Package + "\n"))
	if err := rsa.VerifyPKCS1v15(&wechatpaytest.MerchantKey().PublicKey, crypto.SHA256, h[:], sig); err != nil {
		t.Fatalf("paySign does not verify with the merchant's public key: %v", err)
	}
	again, err := b.a.Create(t.Context(), &orderly.Payment{ID: jsapiID, OrderID: "order-2", Amount: 700, Currency: "CNY", PayerID: openid})
	if err != nil || again.ProviderRef != att.ProviderRef {
		t.Fatalf("jsapi again: %+v, %v; want the same prepay_id %s", again, err, att.ProviderRef)
	}
}

// A refund's status maps to final or not: PROCESSING and ABNORMAL are pending (never
// success), SUCCESS succeeded, CLOSED failed; the query by out_refund_no reads the same,
// and a refund WeChat Pay does not know is ENOTFOUND.
func TestRefundStates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1000, 0)
	b.srv.HoldRefunds(true)
	ask := func(key string, amount int64) *orderly.GatewayRefund {
		return &orderly.GatewayRefund{IdempotencyKey: key, PaymentID: paymentID, Amount: amount, Currency: "CNY"}
	}
	if _, err := b.a.QueryRefund(t.Context(), ask("r1", 100)); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("query of a refund never asked: %v; want ENOTFOUND", err)
	}
	got, err := b.a.Refund(t.Context(), ask("r1", 100))
	if err != nil || got.Status != orderly.GatewayPending || got.Detail != "PROCESSING" || got.ProviderRef == "" {
		t.Fatalf("refund answered PROCESSING: %+v, %v; want pending", got, err)
	}
	ref := got.ProviderRef
	steps := []struct {
		settle string
		want   orderly.GatewayStatus
	}{
		{"", orderly.GatewayPending},
		{"ABNORMAL", orderly.GatewayPending},
		{"SUCCESS", orderly.GatewaySucceeded},
	}
	for _, s := range steps {
		if s.settle != "" {
			if _, err := b.srv.SettleRefund("r1", s.settle); err != nil {
				t.Fatal(err)
			}
		}
		want := &orderly.GatewayRefundResult{Status: s.want, ProviderRef: ref, Detail: map[string]string{"": "PROCESSING"}[s.settle]}
		if s.settle != "" {
			want.Detail = s.settle
		}
		got, err := b.a.QueryRefund(t.Context(), ask("r1", 100))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("query after %q: %+v, %v; want %+v", s.settle, got, err, want)
		}
		if got, err := b.a.Refund(t.Context(), ask("r1", 100)); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("refund replayed after %q: %+v, %v; want %+v", s.settle, got, err, want)
		}
	}
	if _, err := b.a.Refund(t.Context(), ask("r2", 900)); err != nil {
		t.Fatal(err)
	}
	if o, _ := b.srv.Order(paymentID); o.Refunded != 1000 {
		t.Fatalf("refunded %d, want 1000", o.Refunded)
	}
	if _, err := b.srv.SettleRefund("r2", "CLOSED"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.a.QueryRefund(t.Context(), ask("r2", 900)); err != nil || got.Status != orderly.GatewayFailed || got.Detail != "CLOSED" {
		t.Fatalf("query of a closed refund: %+v, %v; want failed", got, err)
	}
	if o, _ := b.srv.Order(paymentID); o.Refunded != 100 {
		t.Fatalf("refunded %d after a refund closed, want 100", o.Refunded)
	}
	b.srv.FailNext("refund-query", 1)
	if _, err := b.a.QueryRefund(t.Context(), ask("r1", 100)); err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query answered 500: %v; want a transient error", err)
	}
}
