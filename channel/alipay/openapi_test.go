package alipay_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
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

// Create answers the trade's out_trade_no and the handoff: the precreated QR code, or,
// in page and wap mode, a signed pay URL that the imitation's cashier opens; a buyer
// paying there gets the trade paid and the signed notification sent to notify_url.
func TestCreateHandoff(t *testing.T) {
	t.Parallel()
	p := &orderly.Payment{ID: paymentID, OrderID: "order-1", Amount: 1234, Currency: "CNY"}
	b := setup(t)
	got, err := b.a.Create(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := b.srv.Trade(paymentID)
	want := &orderly.GatewayAttempt{ProviderRef: tr.OutTradeNo, NextAction: &orderly.NextAction{Type: orderly.NextActionDisplayQRCode, QRCode: tr.QRCode}}
	if !reflect.DeepEqual(got, want) || tr.QRCode != b.srv.BaseURL()+"/qr/"+tr.Token {
		t.Fatalf("Create = %+v %+v, want %+v %+v", got, got.NextAction, want, want.NextAction)
	}
	if _, err := b.srv.Pay(paymentID, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := b.a.Create(t.Context(), p); err != nil || got.ProviderRef != tr.OutTradeNo || got.NextAction != nil {
		t.Fatalf("Create of a paid trade: %+v, %v; want the ref and no handoff", got, err)
	}

	for _, mode := range []string{alipay.PayModePage, alipay.PayModeWAP} {
		notified := make(chan []byte, 1)
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			notified <- body
			_, _ = io.WriteString(w, "success")
		}))
		b := setup(t, func(c *alipay.Config) {
			c.PayMode, c.ReturnURL, c.NotifyURL = mode, "https://shop.example/paid", hook.URL
		})
		got, err := b.a.Create(t.Context(), p)
		if err != nil || got.ProviderRef != "019a7f3c5e2b7c119d3e4f5a6b7c8d9e" || got.NextAction == nil ||
			got.NextAction.Type != orderly.NextActionRedirectToURL || !strings.HasPrefix(got.NextAction.URL, b.srv.URL+"?") {
			t.Fatalf("%s: Create = %+v, %v", mode, got, err)
		}
		u, _ := url.Parse(got.NextAction.URL)
		method := map[string]string{"page": "alipay.trade.page.pay", "wap": "alipay.trade.wap.pay"}[mode]
		if q := u.Query(); q.Get("method") != method || q.Get("sign") == "" || q.Get("notify_url") != hook.URL ||
			q.Get("return_url") != "https://shop.example/paid" || strings.Contains(got.NextAction.URL, "PRIVATE") {
			t.Fatalf("%s: pay URL %s", mode, got.NextAction.URL)
		}
		if _, ok := b.srv.Trade(paymentID); ok {
			t.Fatalf("%s: a trade exists before the buyer opened the URL", mode)
		}
		if q, err := b.a.Query(t.Context(), p); err != nil || q.Status != orderly.GatewayPending {
			t.Fatalf("%s: query before the buyer opened the URL: %+v, %v", mode, q, err)
		}
		resp, err := http.Get(got.NextAction.URL)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr, ok := b.srv.Trade(paymentID)
		if resp.StatusCode != 200 || !ok || tr.Total != 1234 || tr.Status != alipay.TradeWaitBuyerPay ||
			!strings.Contains(string(page), `action="/qr/`+tr.Token+`"`) {
			t.Fatalf("%s: cashier %d %+v\n%s", mode, resp.StatusCode, tr, page)
		}
		// The page's form: the buyer pays.
		resp, err = http.Post(b.srv.BaseURL()+"/qr/"+tr.Token, "application/x-www-form-urlencoded", nil)
		if err != nil {
			t.Fatal(err)
		}
		var scan alipaytest.ScanResult
		_ = json.NewDecoder(resp.Body).Decode(&scan)
		resp.Body.Close()
		if resp.StatusCode != 200 || scan.NotifyAck != "success" || !strings.HasPrefix(scan.ReturnURL, "https://shop.example/paid?") {
			t.Fatalf("%s: pay: %d %+v", mode, resp.StatusCode, scan)
		}
		n := mustVerify(t, b, <-notified)
		if n.Kind != channel.PaymentSucceeded || n.Amount != 1234 || n.ChannelTxnID != scan.TradeNo {
			t.Fatalf("%s: notification %+v", mode, n)
		}
		// Paid already: the buyer cannot pay twice.
		resp, err = http.Post(b.srv.BaseURL()+"/qr/"+tr.Token, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("%s: second payment answered %d", mode, resp.StatusCode)
		}
		hook.Close()
	}
	if _, err := alipay.New(func() alipay.Config { c := b.srv.Config(); c.PayMode = "app"; return c }()); err == nil {
		t.Fatal("PayMode app was accepted")
	}
}

// Refund maps fund_change, QueryRefund maps the refund query: Y and REFUND_SUCCESS are
// the only successes; N and a refund named without refund_status are pending; a refund the
// query does not find is ENOTFOUND, and asked again after a failure it is refused.
func TestRefundStates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1000)
	ref := func(key string, amount int64) *orderly.GatewayRefund {
		return &orderly.GatewayRefund{IdempotencyKey: key, PaymentID: paymentID, Amount: amount,
			Payment: &orderly.Payment{ID: paymentID, ProviderRef: "019a7f3c5e2b7c119d3e4f5a6b7c8d9e", Amount: 1000}}
	}
	check := func(step string, got *orderly.GatewayRefundResult, err error, status orderly.GatewayStatus, detail, code string) {
		t.Helper()
		if orderly.ErrorCode(err) != code && (code != "" || err != nil) {
			t.Fatalf("%s: %+v, %v; want code %q", step, got, err, code)
		}
		if code == "" && (got.Status != status || got.Detail != detail) {
			t.Fatalf("%s: %+v; want %s %q", step, got, status, detail)
		}
	}
	res, err := b.a.QueryRefund(t.Context(), ref("r1", 100))
	check("query before any refund", res, err, "", "", orderly.ENOTFOUND)
	res, err = b.a.Refund(t.Context(), ref("r1", 100))
	check("refund at once", res, err, orderly.GatewaySucceeded, "", "")
	res, err = b.a.Refund(t.Context(), ref("r1", 100))
	check("refund replayed", res, err, orderly.GatewayPending, "fund_change=N", "")
	res, err = b.a.QueryRefund(t.Context(), ref("r1", 100))
	check("query of a refund done", res, err, orderly.GatewaySucceeded, "", "")

	if err := b.srv.SetRefundMode(alipaytest.RefundDeferred); err != nil {
		t.Fatal(err)
	}
	res, err = b.a.Refund(t.Context(), ref("r2", 200))
	check("refund deferred", res, err, orderly.GatewayPending, "fund_change=N", "")
	res, err = b.a.QueryRefund(t.Context(), ref("r2", 200))
	check("query while processing", res, err, orderly.GatewayPending, "refund_status absent", "")
	res, err = b.a.Refund(t.Context(), ref("r3", 701))
	check("refund beyond the rest while r2 is processing", res, err, "", "", orderly.EINVALID)
	if err := b.srv.SettleRefund(paymentID, "r2"); err != nil {
		t.Fatal(err)
	}
	res, err = b.a.QueryRefund(t.Context(), ref("r2", 200))
	check("query after settle", res, err, orderly.GatewaySucceeded, "", "")

	res, err = b.a.Refund(t.Context(), ref("r3", 300))
	check("refund to fail", res, err, orderly.GatewayPending, "fund_change=N", "")
	if err := b.srv.FailRefund(paymentID, "r3", "ACQ.SELLER_BALANCE_NOT_ENOUGH"); err != nil {
		t.Fatal(err)
	}
	res, err = b.a.QueryRefund(t.Context(), ref("r3", 300))
	check("query after the failure", res, err, "", "", orderly.ENOTFOUND)
	res, err = b.a.Refund(t.Context(), ref("r3", 300))
	check("refund asked again after the failure", res, err, "", "", orderly.EINVALID)
	if tr, _ := b.srv.Trade(paymentID); tr.Refunded != 300 || tr.Status != alipay.TradeSuccess {
		t.Fatalf("trade: refunded %d %s; want 300 TRADE_SUCCESS", tr.Refunded, tr.Status)
	}
	other := ref("r1", 100)
	other.PaymentID, other.Payment = "019a7f3c-5e2b-7c11-9d3e-000000000000", nil
	res, err = b.a.QueryRefund(t.Context(), other)
	check("query on a trade that does not exist", res, err, "", "", orderly.ENOTFOUND)
	b.srv.FailNext("alipay.trade.fastpay.refund.query", 1)
	res, err = b.a.QueryRefund(t.Context(), ref("r1", 100))
	if err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		t.Fatalf("query answered 20000: %+v, %v; want a transient error", res, err)
	}
}
