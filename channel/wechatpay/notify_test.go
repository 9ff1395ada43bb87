package wechatpay_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// paymentID is an orderly payment id (a UUIDv7); its out_trade_no is the same without dashes.
const paymentID = "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"

// clock is the imitation's and the verifier's time.
var clock = time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)

type bundle struct {
	srv *wechatpaytest.Server
	a   *wechatpay.Adapter
}

func setup(t testing.TB, mutate ...func(*wechatpaytest.Server, *wechatpay.Config)) *bundle {
	t.Helper()
	srv := wechatpaytest.NewServer()
	t.Cleanup(srv.Close)
	srv.Now = func() time.Time { return clock }
	cfg := srv.Config()
	cfg.NotifyURL = "https://shop.example/v1/channels/wechat/webhook"
	for _, m := range mutate {
		m(srv, &cfg)
	}
	a, err := wechatpay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{srv: srv, a: a}
}

// paid creates a Native order of total fen through the adapter and has the buyer pay
// payerTotal of it.
func (b *bundle) paid(t testing.TB, total, payerTotal int64) wechatpaytest.Order {
	t.Helper()
	if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: total, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	o, err := b.srv.Pay(paymentID, payerTotal)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func eventID(t *testing.T, body []byte) string {
	t.Helper()
	var env struct{ ID string }
	if err := json.Unmarshal(body, &env); err != nil || env.ID == "" {
		t.Fatalf("notification without id: %s", body)
	}
	return env.ID
}

func TestVerifyTransaction(t *testing.T) {
	t.Parallel()
	for _, pub := range []bool{false, true} {
		t.Run("public key "+strconv.FormatBool(pub), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(s *wechatpaytest.Server, _ *wechatpay.Config) { s.UsePublicKey = pub })
			o := b.paid(t, 1, 0)
			h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if serial := h.Get("Wechatpay-Serial"); (serial == wechatpaytest.PublicKeyID) != pub {
				t.Fatalf("serial %s", serial)
			}
			got, err := b.a.Verify(h, body, clock)
			if err != nil {
				t.Fatal(err)
			}
			want := &channel.Notification{Channel: "wechat", EventID: eventID(t, body), Kind: channel.PaymentSucceeded,
				PaymentID: paymentID, ChannelTxnID: o.TransactionID, Amount: 1, Currency: "CNY", OccurredAt: clock, Body: body}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Verify:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// A body with other whitespace verifies when it is what was signed; a body re-formatted
// after signing does not (the signature covers the raw bytes).
func TestVerifyWhitespace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 110, 0)
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{Indent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(body, []byte("\n    ")) {
		t.Fatalf("not indented: %s", body)
	}
	n, err := b.a.Verify(h, body, clock)
	if err != nil || n.Amount != 110 || n.PaymentID != paymentID || !bytes.Equal(n.Body, body) {
		t.Fatalf("indented: %+v, %v", n, err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, body); err != nil {
		t.Fatal(err)
	}
	if n, err := b.a.Verify(h, compact.Bytes(), clock); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
		t.Fatalf("re-formatted after signing: %+v, %v; want %s", n, err, orderly.EUNAUTHORIZED)
	}
}

// Every single-byte change of the body, and a change to any signed header, is refused.
func TestVerifyOneByteChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1, 0)
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		bad := bytes.Clone(body)
		bad[i] ^= 1
		if n, err := b.a.Verify(h, bad, clock); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
			t.Fatalf("byte %d (%q → %q): got %v, %v; want %s", i, body[i], bad[i], n != nil, err, orderly.EUNAUTHORIZED)
		}
	}
	for _, name := range []string{"Wechatpay-Timestamp", "Wechatpay-Nonce", "Wechatpay-Signature"} {
		v := []byte(h.Get(name))
		for _, i := range []int{0, len(v) / 2, len(v) - 3} {
			bad := h.Clone()
			w := bytes.Clone(v)
			w[i] ^= 1
			bad.Set(name, string(w))
			if n, err := b.a.Verify(bad, body, clock); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
				t.Fatalf("%s byte %d: got %v, %v; want %s", name, i, n != nil, err, orderly.EUNAUTHORIZED)
			}
		}
	}
}

func TestVerifyWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1, 0)
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{At: clock})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		now  time.Duration // verifier's clock − the timestamp
		code string
	}{
		{0, ""},
		{299 * time.Second, ""},
		{-299 * time.Second, ""},
		{300 * time.Second, orderly.EUNAUTHORIZED},
		{-300 * time.Second, orderly.EUNAUTHORIZED},
		{24 * time.Hour, orderly.EUNAUTHORIZED},
	}
	for _, tt := range tests {
		if _, err := b.a.Verify(h, body, clock.Add(tt.now)); orderly.ErrorCode(err) != tt.code {
			t.Errorf("now = ts %+v: %v; want code %q", tt.now, err, tt.code)
		}
	}
}

func TestVerifyHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1, 0)
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probeH, probeBody := b.srv.Probe()
	tests := []struct {
		name   string
		change func(http.Header)
		code   string
	}{
		{"valid", func(http.Header) {}, ""},
		{"serial in lower case", func(h http.Header) { h.Set("Wechatpay-Serial", "5157f09efdc096de15ebe81a47057a7232f1b8e1") }, ""},
		{"no signature type", func(h http.Header) { h.Del("Wechatpay-Signature-Type") }, ""},
		{"no timestamp", func(h http.Header) { h.Del("Wechatpay-Timestamp") }, orderly.EUNAUTHORIZED},
		{"no nonce", func(h http.Header) { h.Del("Wechatpay-Nonce") }, orderly.EUNAUTHORIZED},
		{"no signature", func(h http.Header) { h.Del("Wechatpay-Signature") }, orderly.EUNAUTHORIZED},
		{"no serial", func(h http.Header) { h.Del("Wechatpay-Serial") }, orderly.EUNAUTHORIZED},
		{"unknown serial", func(h http.Header) { h.Set("Wechatpay-Serial", "0123456789ABCDEF") }, orderly.EUNAUTHORIZED},
		{"public key id for a certificate signature", func(h http.Header) { h.Set("Wechatpay-Serial", wechatpaytest.PublicKeyID) }, orderly.EUNAUTHORIZED},
		{"other signature type", func(h http.Header) { h.Set("Wechatpay-Signature-Type", "WECHATPAY2-SM2-WITH-SM3") }, orderly.EUNAUTHORIZED},
		{"timestamp not a number", func(h http.Header) { h.Set("Wechatpay-Timestamp", "1.7e9") }, orderly.EUNAUTHORIZED},
		{"signature not base64", func(h http.Header) { h.Set("Wechatpay-Signature", "!!!") }, orderly.EUNAUTHORIZED},
	}
	for _, tt := range tests {
		hh := h.Clone()
		tt.change(hh)
		if n, err := b.a.Verify(hh, body, clock); orderly.ErrorCode(err) != tt.code || (err != nil) != (n == nil) {
			t.Errorf("%s: %+v, %v; want code %q", tt.name, n, err, tt.code)
		}
	}
	if n, err := b.a.Verify(probeH, probeBody, clock); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
		t.Errorf("probe: %+v, %v; want %s", n, err, orderly.EUNAUTHORIZED)
	}
}

// The amount is the order total, not what the payer paid after a discount WeChat Pay
// funded.
func TestVerifyDiscount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.paid(t, 1000, 800)
	if o.PayerTotal != 800 || o.Total != 1000 {
		t.Fatalf("order %+v", o)
	}
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(mustDecrypt(t, body), []byte(`"payer_total":800`)) {
		t.Fatal("the resource does not carry payer_total 800")
	}
	n, err := b.a.Verify(h, body, clock)
	if err != nil || n.Amount != 1000 {
		t.Fatalf("discounted payment: %+v, %v; want Amount 1000", n, err)
	}
}

func mustDecrypt(t *testing.T, body []byte) []byte {
	t.Helper()
	var env struct {
		Resource struct {
			Ciphertext, Nonce string
			AssociatedData    string `json:"associated_data"`
		}
	}
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	plain, err := wechatpay.Decrypt(wechatpaytest.APIv3Key, env.Resource.Nonce, env.Resource.AssociatedData, env.Resource.Ciphertext)
	if err != nil {
		t.Fatal(err)
	}
	return plain
}

func TestVerifyResource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tx := func(change func(map[string]any)) map[string]any {
		r := map[string]any{"appid": wechatpaytest.AppID, "mchid": wechatpaytest.MchID, "out_trade_no": "019a7f3c5e2b7c119d3e4f5a6b7c8d9e",
			"transaction_id": "4200001", "trade_state": "SUCCESS", "success_time": "2026-12-01T04:00:00+08:00",
			"amount": map[string]any{"total": 80, "payer_total": 80, "currency": "JPY", "payer_currency": "JPY"}}
		change(r)
		return r
	}
	tests := []struct {
		name     string
		event    string
		resource map[string]any
		code     string
		amount   int64
		currency string
	}{
		{"JPY 80", wechatpay.EventTransactionSuccess, tx(func(map[string]any) {}), "", 80, "JPY"},
		{"no currency: the channel's", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["amount"] = map[string]any{"total": 5} }), "", 5, "CNY"},
		{"no total", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["amount"] = map[string]any{"payer_total": 5} }), orderly.EINVALID, 0, ""},
		{"unknown currency", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["amount"] = map[string]any{"total": 5, "currency": "XXX"} }), orderly.EINVALID, 0, ""},
		{"other mchid", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["mchid"] = "1900000110" }), orderly.EINVALID, 0, ""},
		{"other appid", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["appid"] = "wx0000" }), orderly.EINVALID, 0, ""},
		{"not SUCCESS", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["trade_state"] = "NOTPAY" }), orderly.EINVALID, 0, ""},
		{"no transaction_id", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { delete(r, "transaction_id") }), orderly.EINVALID, 0, ""},
		{"bad time", wechatpay.EventTransactionSuccess, tx(func(r map[string]any) { r["success_time"] = "2026-12-01 04:00:00" }), orderly.EINVALID, 0, ""},
		{"other event", "TRANSACTION.FUTURE", tx(func(map[string]any) {}), "", 0, "CNY"},
	}
	for _, tt := range tests {
		h, body := b.srv.Notification(tt.event, "transaction", tt.resource, wechatpaytest.NotifyOptions{})
		n, err := b.a.Verify(h, body, clock)
		if orderly.ErrorCode(err) != tt.code {
			t.Errorf("%s: %+v, %v; want code %q", tt.name, n, err, tt.code)
			continue
		}
		if err == nil && (n.Amount != tt.amount || n.Currency != tt.currency) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, n.Amount, n.Currency, tt.amount, tt.currency)
		}
	}
	// Another APIv3 key cannot open the resource: authentic but unreadable.
	other := setup(t, func(_ *wechatpaytest.Server, c *wechatpay.Config) { c.APIv3Key = "another-32-byte-apiv3-key-000000" })
	h, body := other.srv.Notification(wechatpay.EventTransactionSuccess, "transaction", tx(func(map[string]any) {}), wechatpaytest.NotifyOptions{})
	if _, err := other.a.Verify(h, body, clock); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Errorf("other APIv3 key: %v; want %s", err, orderly.EINVALID)
	}
}

func TestVerifyRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.paid(t, 1000, 0)
	key := "payment:" + paymentID
	if _, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: key, PaymentID: paymentID, Amount: 1000, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	after, _ := b.srv.Order(paymentID)
	if _, ok := after.Refunds["payment|"+paymentID]; !ok {
		t.Fatalf("refunds %+v; want out_refund_no payment|%s", after.Refunds, paymentID)
	}
	tests := []struct {
		event string
		kind  channel.Kind
	}{
		{wechatpay.EventRefundSuccess, channel.RefundSucceeded},
		{wechatpay.EventRefundClosed, channel.RefundFailed},
		{wechatpay.EventRefundAbnormal, channel.Ignored}, // not final: the refund stays requested
	}
	for _, tt := range tests {
		h, body, err := b.srv.RefundNotification(paymentID, "payment|"+paymentID, tt.event, wechatpaytest.NotifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.a.Verify(h, body, clock)
		if err != nil {
			t.Fatal(err)
		}
		want := &channel.Notification{Channel: "wechat", EventID: eventID(t, body), Kind: tt.kind, PaymentID: paymentID,
			ChannelTxnID: o.TransactionID, Amount: 1000, Currency: "CNY", RefundID: key, OccurredAt: clock, Body: body}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.event, got, want)
		}
	}
}

func TestAck(t *testing.T) {
	t.Parallel()
	a := setup(t).a
	tests := []struct {
		err    error
		status int
		body   string
	}{
		{nil, 204, ""},
		{orderly.Errorf(orderly.EUNAUTHORIZED, "bad signature"), 401, `{"code":"FAIL","message":"bad signature"}`},
		{orderly.Errorf(orderly.EAMOUNTMISMATCH, "amount differs"), 400, `{"code":"FAIL","message":"amount differs"}`},
		{orderly.Errorf(orderly.EUNAVAILABLE, "busy"), 503, `{"code":"FAIL","message":"busy"}`},
		{http.ErrHandlerTimeout, 500, `{"code":"FAIL","message":"Internal error."}`},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		a.Ack(w, tt.err)
		if w.Code != tt.status || w.Body.String() != tt.body {
			t.Errorf("Ack(%v) = %d %q, want %d %q", tt.err, w.Code, w.Body.String(), tt.status, tt.body)
		}
	}
}

func TestOutRefundNo(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want string }{
		{"019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e", "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"},
		{"payment:019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e", "payment|019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"},
	}
	for _, tt := range tests {
		got := wechatpay.OutRefundNo(tt.key)
		if got != tt.want || len(got) > 64 {
			t.Errorf("OutRefundNo(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
	// Keys WeChat Pay cannot take, or whose '|' would not come back, are hashed: "H" and
	// 40 hex digits, different per key, the same on every call.
	for _, key := range []string{"refund #1", "a|b", "payment:" + strings.Repeat("x", 60)} {
		h := wechatpay.OutRefundNo(key)
		if len(h) != 41 || h[0] != 'H' || h != wechatpay.OutRefundNo(key) || h == wechatpay.OutRefundNo(key+"2") {
			t.Errorf("OutRefundNo(%q) = %q; want a stable hash", key, h)
		}
	}
	if k := wechatpay.RefundKey(wechatpay.OutRefundNo("payment:x-1")); k != "payment:x-1" {
		t.Errorf("RefundKey = %q", k)
	}
}
