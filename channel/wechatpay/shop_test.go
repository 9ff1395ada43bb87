package wechatpay_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
)

// shop is a whole engine (as `orderly serve` runs it) with the WeChat Pay channel on the
// imitation, seen over HTTP only: the shop's calls go to orderly, the buyer's client step
// to the imitation, and the imitation notifies orderly's notify URL itself.
type shop struct {
	t    *testing.T
	url  string // orderly
	wx   *wechatpaytest.Server
	http *http.Client
}

func newShop(t *testing.T) *shop {
	t.Helper()
	ctx := t.Context()
	// The notify URL is configured before the engine listens: reserve a port for it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	wx := wechatpaytest.NewServer()
	t.Cleanup(wx.Close)
	wx.Notify(nil)
	cfg := wx.Config()
	cfg.NotifyURL = "http://" + addr + wechatpaytest.WebhookPath
	a, err := wechatpay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, engine.Config{
		Addr: addr, DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
		InstanceID: t.Name(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Channels: []channel.Adapter{a}, DefaultChannel: wechatpay.Name,
		OutboxMinBackoff: 50 * time.Millisecond, // a refund still PROCESSING is asked again soon
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(func() {
		hc.CloseIdleConnections() // first: Close waits 5 s for a connection that sent nothing
		_ = e.Close(context.WithoutCancel(ctx))
	})
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &shop{t: t, url: e.URL(), wx: wx, http: hc}
}

// call makes one JSON request and decodes the answer; it fails the test on a status other
// than want.
func (s *shop) call(method, url string, body any, want int) map[string]any {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, url, r)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &v); err != nil {
			s.t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
	}
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s; want %d", method, url, resp.StatusCode, b, want)
	}
	return v
}

// eventually reads what until ok holds, for at most 20 s: the relay and the notifications
// run in the background.
func (s *shop) eventually(what string, read func() map[string]any, ok func(map[string]any) bool) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		v := read()
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: still %v", what, v)
		}
		<-tick.C
	}
}

func (s *shop) order(id string) map[string]any {
	return s.call(http.MethodGet, s.url+"/v1/orders/"+id, nil, http.StatusOK)
}

func (s *shop) stock(sku string) (available, held, sold float64) {
	v := s.call(http.MethodGet, s.url+"/v1/inventory/"+sku, nil, http.StatusOK)
	return v["available"].(float64), v["held"].(float64), v["sold"].(float64)
}

func (s *shop) wantStock(sku string, available, held, sold float64) {
	s.t.Helper()
	if a, h, so := s.stock(sku); a != available || h != held || so != sold {
		s.t.Fatalf("stock of %s: available %v held %v sold %v; want %v %v %v", sku, a, h, so, available, held, sold)
	}
}

// refund reads refund id of order orderID.
func (s *shop) refund(orderID, id string) map[string]any {
	s.t.Helper()
	list := s.call(http.MethodGet, s.url+"/v1/orders/"+orderID+"/refunds", nil, http.StatusOK)
	for _, f := range list["refunds"].([]any) {
		if f := f.(map[string]any); f["id"] == id {
			return f
		}
	}
	s.t.Fatalf("order %s has no refund %s", orderID, id)
	return nil
}

// refundNow asks for a refund and waits until the relay has asked WeChat Pay, which holds
// it PROCESSING: the refund stays requested with that provider status.
func (s *shop) refundNow(orderID string, body map[string]any) string {
	s.t.Helper()
	f := s.call(http.MethodPost, s.url+"/v1/orders/"+orderID+"/refunds", body, http.StatusCreated)
	id := f["id"].(string)
	f = s.eventually("refund "+id+" asked of WeChat Pay", func() map[string]any { return s.refund(orderID, id) },
		func(f map[string]any) bool { return f["provider_status"] == "PROCESSING" })
	if f["state"] != "requested" || f["provider_ref"] == nil || f["completed_at"] != nil {
		s.t.Fatalf("refund answered PROCESSING: %v; want requested", f)
	}
	return id
}

func (s *shop) orderIs(id, state, payStatus string, refunded float64) {
	s.t.Helper()
	s.eventually("order "+id, func() map[string]any { return s.order(id) }, func(o map[string]any) bool {
		return o["state"] == state && o["pay_status"] == payStatus && o["refunded_amount"] == refunded
	})
}

// TestShopOverHTTP drives a shop's whole path over HTTP: stock, an order in CNY, a WeChat
// Native payment whose QR code the buyer pays at the imitation, the notification at
// orderly's webhook, then refunds that WeChat Pay answers PROCESSING and ends late — by
// query, by REFUND.SUCCESS, by REFUND.CLOSED — and one that stays ABNORMAL; and a JSAPI
// payment whose signed parameters the buyer's client checks and pays.
func TestShopOverHTTP(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.call(http.MethodPut, s.url+"/v1/inventory/SKU-1", map[string]any{"available": 10}, http.StatusOK)
	o := s.call(http.MethodPost, s.url+"/v1/orders", map[string]any{"user_id": "u1", "currency": "CNY",
		"items": []map[string]any{{"sku": "SKU-1", "quantity": 4, "unit_price": 2500}}}, http.StatusCreated)
	id := o["id"].(string)
	if o["amount"] != 10000.0 || o["state"] != "pending_payment" {
		t.Fatalf("order %v", o)
	}
	s.wantStock("SKU-1", 6, 4, 0)

	p := s.call(http.MethodPost, s.url+"/v1/orders/"+id+"/payments", map[string]any{"channel": "wechat"}, http.StatusCreated)
	na, _ := p["next_action"].(map[string]any)
	qr, _ := na["qr_code"].(string)
	if na["type"] != "display_qr_code" || !strings.HasPrefix(qr, "weixin://wxpay/bizpayurl?pr=") ||
		p["provider_ref"] != strings.ReplaceAll(p["payment_id"].(string), "-", "") || p["state"] != "initiated" {
		t.Fatalf("payment %v", p)
	}
	paid := s.call(http.MethodPost, s.wx.URL+wechatpaytest.PayPath, map[string]string{"code_url": qr}, http.StatusOK)
	if paid["trade_state"] != "SUCCESS" {
		t.Fatalf("client step: %v", paid)
	}
	s.orderIs(id, "paid", "paid", 0)
	pay := s.call(http.MethodGet, s.url+"/v1/payments/"+p["payment_id"].(string), nil, http.StatusOK)
	if pay["state"] != "succeeded" || pay["channel_txn_id"] != paid["transaction_id"] || pay["amount"] != 10000.0 {
		t.Fatalf("payment after the notification: %v", pay)
	}
	s.wantStock("SKU-1", 6, 0, 4)
	s.call(http.MethodPost, s.wx.URL+wechatpaytest.PayPath, map[string]string{"code_url": qr}, http.StatusConflict)

	s.wx.HoldRefunds(true)
	// 1. PROCESSING, confirmed late by the relay's query (no notification reaches orderly).
	r1 := s.refundNow(id, map[string]any{"amount": 2500, "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}, "restock": true})
	s.orderIs(id, "paid", "paid", 2500) // refunded_amount holds requested refunds: not confirmed yet
	s.wantStock("SKU-1", 6, 0, 4)
	s.wx.NotifyOff()
	if _, err := s.wx.SettleRefund(r1, wechatpay.RefundSuccess); err != nil {
		t.Fatal(err)
	}
	s.eventually("refund 1 confirmed by query", func() map[string]any { return s.refund(id, r1) },
		func(f map[string]any) bool { return f["state"] == "succeeded" })
	s.wx.Notify(nil)
	s.orderIs(id, "paid", "partially_refunded", 2500)
	s.wantStock("SKU-1", 7, 0, 3)

	// 2. PROCESSING, then CLOSED by notification: failed, its amount refundable again.
	r2 := s.refundNow(id, map[string]any{"amount": 2500})
	if _, err := s.wx.SettleRefund(r2, wechatpay.RefundClosed); err != nil {
		t.Fatal(err)
	}
	f2 := s.eventually("refund 2 closed", func() map[string]any { return s.refund(id, r2) },
		func(f map[string]any) bool { return f["state"] == "failed" })
	if f2["provider_status"] != nil || f2["fail_reason"] != "gateway: refund failed at wechat" {
		t.Fatalf("failed refund %v", f2)
	}
	s.orderIs(id, "paid", "partially_refunded", 2500)

	// 3. PROCESSING, then SUCCESS by notification: 7500 of 10000 refunded now.
	r3 := s.refundNow(id, map[string]any{"amount": 5000, "items": []map[string]any{{"sku": "SKU-1", "quantity": 2}}, "restock": true})
	s.orderIs(id, "paid", "partially_refunded", 7500)
	s.wantStock("SKU-1", 7, 0, 3)
	if _, err := s.wx.SettleRefund(r3, wechatpay.RefundSuccess); err != nil {
		t.Fatal(err)
	}
	s.eventually("refund 3 confirmed by notification", func() map[string]any { return s.refund(id, r3) },
		func(f map[string]any) bool { return f["state"] == "succeeded" })
	s.orderIs(id, "paid", "partially_refunded", 7500)
	s.wantStock("SKU-1", 9, 0, 1)

	// 4. PROCESSING, then ABNORMAL: requested with provider status ABNORMAL, never counted.
	r4 := s.refundNow(id, map[string]any{"amount": 2500, "items": []map[string]any{{"sku": "SKU-1", "quantity": 1}}, "restock": true})
	if _, err := s.wx.SettleRefund(r4, wechatpay.RefundAbnormal); err != nil {
		t.Fatal(err)
	}
	f4 := s.eventually("refund 4 abnormal", func() map[string]any { return s.refund(id, r4) },
		func(f map[string]any) bool { return f["provider_status"] == "ABNORMAL" })
	if f4["state"] != "requested" {
		t.Fatalf("abnormal refund %v; want requested", f4)
	}
	s.orderIs(id, "refunding", "partially_refunded", 10000) // requested in full, 7500 confirmed
	s.wantStock("SKU-1", 9, 0, 1)
	var abnormal, refundAcks int
	for _, d := range s.wx.Deliveries() {
		if d.EventType == "REFUND.ABNORMAL" && d.Acked && d.Status == http.StatusNoContent {
			abnormal++
		}
		if strings.HasPrefix(d.EventType, "REFUND.") && d.Acked {
			refundAcks++
		}
	}
	if abnormal != 1 || refundAcks != 3 {
		t.Fatalf("deliveries %+v: want REFUND.CLOSED, REFUND.SUCCESS and REFUND.ABNORMAL acknowledged", s.wx.Deliveries())
	}

	// A JSAPI payment: the buyer's client gets the signed parameters and pays with them.
	const openid = "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o"
	o2 := s.call(http.MethodPost, s.url+"/v1/orders", map[string]any{"user_id": "u2", "currency": "CNY",
		"items": []map[string]any{{"sku": "SKU-1", "quantity": 1, "unit_price": 1999}}}, http.StatusCreated)
	id2 := o2["id"].(string)
	p2 := s.call(http.MethodPost, s.url+"/v1/orders/"+id2+"/payments", map[string]any{"channel": "wechat", "payer_id": openid}, http.StatusCreated)
	na2, _ := p2["next_action"].(map[string]any)
	j, _ := na2["wechat_jsapi"].(map[string]any)
	if na2["type"] != "wechat_jsapi" || j == nil || j["package"] != "prepay_id="+p2["provider_ref"].(string) || j["signType"] != "RSA" ||
		j["appId"] != wechatpaytest.AppID || p2["payer_id"] != openid {
		t.Fatalf("JSAPI payment %v", p2)
	}
	sig, err := base64.StdEncoding.DecodeString(j["paySign"].(string))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(j["appId"].(string) + "\n" + j["timeStamp"].(string) + "\n" + j["nonceStr"].(string) + "\n" + j["package"].(string) + "\n"))
	if err := rsa.VerifyPKCS1v15(&wechatpaytest.MerchantKey().PublicKey, crypto.SHA256, h[:], sig); err != nil {
		t.Fatalf("paySign does not verify with the merchant's public key: %v", err)
	}
	forged := map[string]any{}
	for k, v := range j {
		forged[k] = v
	}
	forged["nonceStr"] = "forged"
	s.call(http.MethodPost, s.wx.URL+wechatpaytest.PayPath, forged, http.StatusUnauthorized)
	other := map[string]any{"openid": "oSomeoneElse"}
	for k, v := range j {
		other[k] = v
	}
	s.call(http.MethodPost, s.wx.URL+wechatpaytest.PayPath, other, http.StatusForbidden)
	j["openid"] = openid
	s.call(http.MethodPost, s.wx.URL+wechatpaytest.PayPath, j, http.StatusOK)
	s.orderIs(id2, "paid", "paid", 0)
	s.wantStock("SKU-1", 8, 0, 2)
}
