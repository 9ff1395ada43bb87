package alipay_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// paymentID is an orderly payment id (a UUIDv7); its out_trade_no is the same without dashes.
const paymentID = "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"

// clock is the imitation's time: 2026-11-30 20:00:00 UTC, 2026-12-01 04:00:00 in Beijing.
var clock = time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)

type bundle struct {
	srv *alipaytest.Server
	a   *alipay.Adapter
}

func setup(t testing.TB, mutate ...func(*alipay.Config)) *bundle {
	t.Helper()
	srv := alipaytest.NewServer()
	t.Cleanup(srv.Close)
	srv.Now = func() time.Time { return clock }
	cfg := srv.Config()
	cfg.Now = func() time.Time { return clock }
	for _, m := range mutate {
		m(&cfg)
	}
	a, err := alipay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{srv: srv, a: a}
}

// paid precreates a payment of amount fen through the adapter and has the buyer pay it.
func (b *bundle) paid(t *testing.T, amount int64) alipaytest.Trade {
	t.Helper()
	p := &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: amount, Currency: "CNY"}
	if _, err := b.a.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	tr, err := b.srv.Pay(paymentID, amount)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func notifyID(t *testing.T, body []byte) string {
	t.Helper()
	form, err := url.ParseQuery(string(body))
	if err != nil {
		t.Fatal(err)
	}
	return form.Get("notify_id")
}

func codeOf(err error) string { return orderly.ErrorCode(err) }

func TestVerifyPaymentNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.paid(t, 1)
	body, err := b.srv.PaymentNotification(paymentID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.a.Verify(http.Header{}, body, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := &channel.Notification{
		Channel: "alipay", EventID: notifyID(t, body), Kind: channel.PaymentSucceeded,
		PaymentID: paymentID, ChannelTxnID: tr.TradeNo, Amount: 1, Currency: "CNY",
		OccurredAt: clock, Body: body,
	}
	if want.EventID == "" || want.ChannelTxnID == "" {
		t.Fatalf("imitation sent no notify_id or trade_no: %s", body)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Verify:\n got %+v\nwant %+v", got, want)
	}
}

// A notification whose fields a client re-ordered and re-encoded is the same notification:
// Alipay signs the decoded, sorted parameters, not the bytes.
func TestVerifyReencoded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 110)
	body, err := b.srv.PaymentNotification(paymentID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.a.Verify(nil, body, clock)
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(8) {
		re := alipaytest.Reencode(body, seed)
		if bytes.Equal(re, body) {
			t.Fatalf("seed %d: Reencode changed nothing", seed)
		}
		got, err := b.a.Verify(nil, re, clock)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, re)
		}
		if !bytes.Equal(got.Body, re) {
			t.Fatalf("seed %d: Body is not the bytes received", seed)
		}
		got.Body = want.Body
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d:\n got %+v\nwant %+v", seed, got, want)
		}
	}
}

// Every single-byte change of an authentic body is refused as unauthorized.
func TestVerifyOneByteChanged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1)
	body, err := b.srv.PaymentNotification(paymentID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		bad := bytes.Clone(body)
		bad[i] ^= 1
		n, err := b.a.Verify(nil, bad, clock)
		if codeOf(err) != orderly.EUNAUTHORIZED {
			t.Fatalf("byte %d (%q → %q): got %v, %v; want %s", i, body[i], bad[i], n != nil, err, orderly.EUNAUTHORIZED)
		}
	}
}

func TestVerifyRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.paid(t, 1)
	valid := func() map[string]string {
		return map[string]string{
			"notify_id": "n-1", "notify_time": "2026-12-01 04:00:00", "app_id": alipaytest.AppID,
			"seller_id": alipaytest.SellerID, "out_trade_no": tr.OutTradeNo, "trade_no": tr.TradeNo,
			"trade_status": "TRADE_SUCCESS", "total_amount": "0.01", "gmt_payment": "2026-12-01 04:00:00",
		}
	}
	body := b.srv.SignNotification(valid())
	form, _ := url.ParseQuery(string(body))
	tests := []struct {
		name string
		body []byte
		code string
	}{
		{"valid", body, ""},
		{"no sign", []byte(withForm(form, func(f url.Values) { f.Del("sign") })), orderly.EUNAUTHORIZED},
		{"no sign_type", []byte(withForm(form, func(f url.Values) { f.Del("sign_type") })), orderly.EUNAUTHORIZED},
		{"sign_type RSA", []byte(withForm(form, func(f url.Values) { f.Set("sign_type", "RSA") })), orderly.EUNAUTHORIZED},
		{"field twice", []byte(withForm(form, func(f url.Values) { f.Add("total_amount", "0.01") })), orderly.EUNAUTHORIZED},
		{"not a form", []byte("a=%zz"), orderly.EUNAUTHORIZED},
		{"empty", nil, orderly.EUNAUTHORIZED},
		{"other key", signedBy(t, valid()), orderly.EUNAUTHORIZED},
		{"other app_id", b.srv.SignNotification(with(valid(), "app_id", "2021000000000002")), orderly.EINVALID},
		{"other seller_id", b.srv.SignNotification(with(valid(), "seller_id", "2088000000000002")), orderly.EINVALID},
		{"no out_trade_no", b.srv.SignNotification(with(valid(), "out_trade_no", "")), orderly.EINVALID},
		{"no notify_id", b.srv.SignNotification(with(valid(), "notify_id", "")), orderly.EINVALID},
		{"no trade_no", b.srv.SignNotification(with(valid(), "trade_no", "")), orderly.EINVALID},
		{"unknown status", b.srv.SignNotification(with(valid(), "trade_status", "TRADE_PENDING")), orderly.EINVALID},
		{"bad time", b.srv.SignNotification(with(valid(), "gmt_payment", "2026-12-01T04:00:00Z")), orderly.EINVALID},
		{"refund with a bad refund_fee", b.srv.SignNotification(with(with(valid(), "refund_fee", "0.001"), "gmt_refund", "2026-12-01 04:00:00")), orderly.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := b.a.Verify(nil, tt.body, clock)
			if codeOf(err) != tt.code {
				t.Fatalf("got %+v, %v; want code %q", n, err, tt.code)
			}
			if err != nil && n != nil {
				t.Fatalf("a refusal returned a notification: %+v", n)
			}
		})
	}
}

func withForm(f url.Values, change func(url.Values)) string {
	c := url.Values{}
	for k, v := range f {
		c[k] = append([]string(nil), v...)
	}
	change(c)
	return c.Encode()
}

func with(p map[string]string, k, v string) map[string]string {
	p[k] = v
	return p
}

// signedBy signs params with a key other than the Alipay key the adapter trusts (the
// merchant's own key).
func signedBy(t *testing.T, params map[string]string) []byte {
	t.Helper()
	digest := sha256.Sum256([]byte(alipay.SignContent(params, "sign", "sign_type")))
	sig, err := rsa.SignPKCS1v15(rand.Reader, alipaytest.MerchantKey(), crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"sign_type": {"RSA2"}, "sign": {base64.StdEncoding.EncodeToString(sig)}}
	for k, v := range params {
		form.Set(k, v)
	}
	return []byte(form.Encode())
}

// Amounts are decimal yuan converted exactly; Alipay has no timestamp to check, so there
// is no replay-window case (a replay is left to the dedupe on notify_id).
func TestVerifyAmounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		currency string
		amount   string
		want     int64
		code     string
	}{
		{"CNY", "0.01", 1, ""},
		{"CNY", "1.10", 110, ""},
		{"CNY", "1.1", 110, ""},
		{"CNY", "12", 1200, ""},
		{"CNY", "99999999.99", 9999999999, ""},
		{"CNY", "1.005", 0, orderly.EINVALID},
		{"CNY", "0.001", 0, orderly.EINVALID},
		{"CNY", "-1.00", 0, orderly.EINVALID},
		{"CNY", "1e2", 0, orderly.EINVALID},
		{"CNY", ".5", 0, orderly.EINVALID},
		{"CNY", "1.", 0, orderly.EINVALID},
		{"CNY", " 1.00", 0, orderly.EINVALID},
		{"CNY", "", 0, orderly.EINVALID},
		{"CNY", "92233720368547758.08", 0, orderly.EINVALID},
		{"JPY", "80", 80, ""},
		{"JPY", "80.5", 0, orderly.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.currency+" "+tt.amount, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *alipay.Config) { c.Currency = tt.currency })
			body := b.srv.SignNotification(map[string]string{
				"notify_id": "n-1", "notify_time": "2026-12-01 04:00:00", "app_id": alipaytest.AppID,
				"seller_id": alipaytest.SellerID, "out_trade_no": "t1", "trade_no": "2026113022001",
				"trade_status": "TRADE_SUCCESS", "total_amount": tt.amount,
			})
			n, err := b.a.Verify(nil, body, clock)
			if codeOf(err) != tt.code {
				t.Fatalf("got %+v, %v; want code %q", n, err, tt.code)
			}
			if err == nil && (n.Amount != tt.want || n.Currency != tt.currency) {
				t.Fatalf("got %d %s, want %d %s", n.Amount, n.Currency, tt.want, tt.currency)
			}
		})
	}
}

// TRADE_FINISHED after TRADE_SUCCESS, and after a refund, names the same payment and
// trade: the payment service sees a duplicate and neither fulfils nor refunds again.
func TestVerifyFinishedAfterSuccessAndRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.paid(t, 1000)
	success := mustVerify(t, b, must(b.srv.PaymentNotification(paymentID)))

	if _, err := b.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "refund-1", PaymentID: paymentID, Amount: 300, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	refund := mustVerify(t, b, must(b.srv.RefundNotification(paymentID, "refund-1")))
	want := channel.Notification{Channel: "alipay", EventID: refund.EventID, Kind: channel.RefundSucceeded,
		PaymentID: paymentID, ChannelTxnID: tr.TradeNo, Amount: 300, Currency: "CNY", RefundID: "refund-1",
		OccurredAt: clock, Body: refund.Body}
	if !reflect.DeepEqual(*refund, want) {
		t.Fatalf("refund notification:\n got %+v\nwant %+v", *refund, want)
	}

	if err := b.srv.Finish(paymentID); err != nil {
		t.Fatal(err)
	}
	finished := mustVerify(t, b, must(b.srv.PaymentNotification(paymentID)))
	if finished.Kind != channel.PaymentSucceeded || finished.PaymentID != success.PaymentID ||
		finished.ChannelTxnID != success.ChannelTxnID || finished.Amount != success.Amount {
		t.Fatalf("TRADE_FINISHED %+v is not the payment of TRADE_SUCCESS %+v", finished, success)
	}
	if finished.EventID == success.EventID {
		t.Fatalf("TRADE_FINISHED has the notify_id of TRADE_SUCCESS: %s", finished.EventID)
	}

	// A TRADE_FINISHED that carries the refund's fields is still the payment, never a
	// second refund.
	form, _ := url.ParseQuery(string(finished.Body))
	params := map[string]string{}
	for k := range form {
		params[k] = form.Get(k)
	}
	params["refund_fee"], params["gmt_refund"], params["out_biz_no"] = "3.00", "2026-12-01 04:00:00.000", "refund-1"
	delete(params, "sign")
	withRefund := mustVerify(t, b, b.srv.SignNotification(params))
	if withRefund.Kind != channel.PaymentSucceeded || withRefund.ChannelTxnID != success.ChannelTxnID || withRefund.RefundID != "" {
		t.Fatalf("TRADE_FINISHED with refund fields: %+v", withRefund)
	}

	// The full refund closes the trade: TRADE_CLOSED with refund fields is a refund, not
	// a failed payment.
	b2 := setup(t)
	b2.paid(t, 500)
	if _, err := b2.a.Refund(t.Context(), &orderly.GatewayRefund{IdempotencyKey: "payment:" + paymentID, PaymentID: paymentID, Amount: 500, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	full := mustVerify(t, b2, must(b2.srv.RefundNotification(paymentID, "payment:"+paymentID)))
	if full.Kind != channel.RefundSucceeded || full.Amount != 500 || full.RefundID != "payment:"+paymentID {
		t.Fatalf("full refund: %+v", full)
	}
}

// Notifications that speak of a refund are never payments, and confirm a refund only when
// they say money went back (refund_fee and gmt_refund); refund_fee "0.00" is no refund.
func TestVerifyRefundShapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.paid(t, 1000)
	base := map[string]string{
		"notify_id": "n-1", "notify_time": "2026-12-01 04:00:00", "app_id": alipaytest.AppID,
		"seller_id": alipaytest.SellerID, "out_trade_no": tr.OutTradeNo, "trade_no": tr.TradeNo,
		"trade_status": "TRADE_SUCCESS", "total_amount": "10.00", "gmt_payment": "2026-12-01 04:00:00",
	}
	tests := []struct {
		name   string
		fields map[string]string
		kind   channel.Kind
		refund string
		amount int64
	}{
		{"payment with refund_fee 0.00", map[string]string{"refund_fee": "0.00"}, channel.PaymentSucceeded, "", 1000},
		{"refund_fee alone", map[string]string{"refund_fee": "3.00"}, channel.Ignored, "", 1000},
		{"out_biz_no alone", map[string]string{"out_biz_no": "r-1"}, channel.Ignored, "", 1000},
		{"closed with out_biz_no alone", map[string]string{"trade_status": "TRADE_CLOSED", "out_biz_no": "r-1"}, channel.Ignored, "", 1000},
		{"partial refund", map[string]string{"refund_fee": "3.00", "gmt_refund": "2026-12-01 04:00:00.000", "out_biz_no": "r-1"},
			channel.RefundSucceeded, "r-1", 300},
		{"full refund", map[string]string{"trade_status": "TRADE_CLOSED", "refund_fee": "10.00", "gmt_refund": "2026-12-01 04:00:00", "out_biz_no": "r-2"},
			channel.RefundSucceeded, "r-2", 1000},
		{"refund made in the console", map[string]string{"refund_fee": "1.00", "gmt_refund": "2026-12-01 04:00:00"}, channel.RefundSucceeded, "", 100},
	}
	for _, tt := range tests {
		params := map[string]string{}
		for k, v := range base {
			params[k] = v
		}
		for k, v := range tt.fields {
			params[k] = v
		}
		n := mustVerify(t, b, b.srv.SignNotification(params))
		if n.Kind != tt.kind || n.RefundID != tt.refund || n.Amount != tt.amount {
			t.Errorf("%s: %s refund %q amount %d; want %s %q %d", tt.name, n.Kind, n.RefundID, n.Amount, tt.kind, tt.refund, tt.amount)
		}
	}
}

func TestVerifyClosedUnpaid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: paymentID, OrderID: "o", Amount: 250, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.a.Cancel(t.Context(), &orderly.Payment{ID: paymentID}); err != nil {
		t.Fatal(err)
	}
	n := mustVerify(t, b, must(b.srv.PaymentNotification(paymentID)))
	if n.Kind != channel.PaymentFailed || n.PaymentID != paymentID || n.Amount != 250 || n.ChannelTxnID != "" {
		t.Fatalf("closed unpaid: %+v", n)
	}
}

func mustVerify(t *testing.T, b *bundle, body []byte) *channel.Notification {
	t.Helper()
	n, err := b.a.Verify(nil, body, clock)
	if err != nil {
		t.Fatalf("Verify: %v\n%s", err, body)
	}
	return n
}

func must(body []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return body
}

func TestAck(t *testing.T) {
	t.Parallel()
	a := setup(t).a
	tests := []struct {
		err    error
		status int
		body   string
	}{
		{nil, 200, "success"},
		{orderly.Errorf(orderly.EUNAUTHORIZED, "bad sign"), 401, "fail"},
		{orderly.Errorf(orderly.EINVALID, "other app"), 422, "fail"},
		{orderly.Errorf(orderly.EUNAVAILABLE, "busy"), 503, "fail"},
		{http.ErrHandlerTimeout, 500, "fail"},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		a.Ack(w, tt.err)
		if w.Code != tt.status || w.Body.String() != tt.body {
			t.Errorf("Ack(%v) = %d %q, want %d %q", tt.err, w.Code, w.Body.String(), tt.status, tt.body)
		}
	}
}
