package alipay_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// shop is a shop's view of orderly over HTTP: the engine's API on 127.0.0.1, an imitation
// Alipay whose notifications go to the API's webhook route, and the relay driven by the
// test (Drain after the clock moved past a retry's backoff), so that nothing waits on
// sleeps.
type shop struct {
	t      *testing.T
	url    string
	client *http.Client
	e      *enginetest.Env
	srv    *alipaytest.Server
}

func newShop(t *testing.T) *shop {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.Addr().String()
	srv := alipaytest.NewServer()
	t.Cleanup(srv.Close)
	cfg := srv.Config()
	cfg.NotifyURL = base + alipaytest.WebhookPath
	a, err := alipay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := enginetest.New(t, enginetest.Options{Channels: []channel.Adapter{a}})
	hs := &http.Server{Handler: e.Engine.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(l) }()
	client := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.NotifyClient.CloseIdleConnections()
		_ = hs.Close()
	})
	return &shop{t: t, url: base, client: client, e: e, srv: srv}
}

// do sends a JSON request to orderly and decodes the answer into out; it fails the test
// unless the status is want.
func (s *shop) do(method, path string, body any, want int, out any) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s; want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
}

type stockJSON struct {
	Available, Held, Sold int64
}

type orderJSON struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	PayStatus      string `json:"pay_status"`
	Amount         int64  `json:"amount"`
	RefundedAmount int64  `json:"refunded_amount"`
}

type refundJSON struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	State          string `json:"state"`
	FailReason     string `json:"fail_reason"`
	ProviderStatus string `json:"provider_status"`
}

func (s *shop) stock(want stockJSON) {
	s.t.Helper()
	var got stockJSON
	s.do("GET", "/v1/inventory/SKU-A", nil, 200, &got)
	if got != want {
		s.t.Fatalf("stock %+v, want %+v", got, want)
	}
}

func (s *shop) order(id, state, payStatus string, refunded int64) {
	s.t.Helper()
	var o orderJSON
	s.do("GET", "/v1/orders/"+id, nil, 200, &o)
	if o.State != state || o.PayStatus != payStatus || o.RefundedAmount != refunded || o.Amount != 3000 {
		s.t.Fatalf("order %+v; want %s/%s amount 3000 refunded %d", o, state, payStatus, refunded)
	}
}

// refund returns the order's refund id as orderly answers it.
func (s *shop) refund(orderID, id string) refundJSON {
	s.t.Helper()
	var list struct{ Refunds []refundJSON }
	s.do("GET", "/v1/orders/"+orderID+"/refunds", nil, 200, &list)
	for _, f := range list.Refunds {
		if f.ID == id {
			return f
		}
	}
	s.t.Fatalf("refund %s not in %+v", id, list.Refunds)
	return refundJSON{}
}

// relay delivers what is due after the clock moved past any retry's backoff (at most 5 min).
func (s *shop) relay() {
	s.t.Helper()
	s.e.Clock.Advance(6 * time.Minute)
	s.e.Drain(s.t)
}

// A shop's whole path with Alipay over HTTP only: stock, an order in CNY, an Alipay
// attempt whose next_action is the precreated QR code, the buyer paying at the imitation
// with nothing but that code, the signed notification arriving at the webhook route, and
// three refunds that Alipay accepts without moving money (fund_change N): one confirmed
// late by the refund query, one that fails (its amount becomes refundable again), one
// that succeeds. Stock, amounts and states are checked at each step.
func TestShopOverHTTP(t *testing.T) {
	t.Parallel()
	s := newShop(t)
	s.do("PUT", "/v1/inventory/SKU-A", map[string]any{"available": 10}, 200, nil)
	var o orderJSON
	s.do("POST", "/v1/orders", map[string]any{"user_id": "buyer-1", "currency": "CNY",
		"items": []map[string]any{{"sku": "SKU-A", "quantity": 3, "unit_price": 1000}}}, 201, &o)
	s.stock(stockJSON{Available: 7, Held: 3})

	type paymentJSON struct {
		PaymentID    string `json:"payment_id"`
		State        string `json:"state"`
		Channel      string `json:"channel"`
		ProviderRef  string `json:"provider_ref"`
		ChannelTxnID string `json:"channel_txn_id"`
		NextAction   *struct {
			Type   string `json:"type"`
			QRCode string `json:"qr_code"`
			URL    string `json:"url"`
		} `json:"next_action"`
	}
	var p paymentJSON
	s.do("POST", "/v1/orders/"+o.ID+"/payments", map[string]any{"channel": "alipay"}, 201, &p)
	if p.Channel != "alipay" || p.ProviderRef != strings.ReplaceAll(p.PaymentID, "-", "") || p.NextAction == nil ||
		p.NextAction.Type != "display_qr_code" || !strings.HasPrefix(p.NextAction.QRCode, s.srv.BaseURL()+"/qr/") {
		t.Fatalf("payment started: %+v %+v", p, p.NextAction)
	}
	var again paymentJSON
	s.do("GET", "/v1/payments/"+p.PaymentID, nil, 200, &again)
	if again.NextAction == nil || again.NextAction.QRCode != p.NextAction.QRCode || again.ProviderRef != p.ProviderRef || again.State != "initiated" {
		t.Fatalf("GET payment: %+v", again)
	}
	s.order(o.ID, "pending_payment", "paying", 0)

	// The buyer scans the code: the Alipay app pays it, and Alipay posts the notification.
	resp, err := http.Post(again.NextAction.QRCode, "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	var scan alipaytest.ScanResult
	err = json.NewDecoder(resp.Body).Decode(&scan)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || scan.TradeStatus != alipay.TradeSuccess || scan.NotifyStatus != 200 ||
		scan.NotifyAck != "success" || scan.TotalAmount != "30.00" || scan.NotifyURL != s.url+alipaytest.WebhookPath {
		t.Fatalf("scan: %d %+v, %v", resp.StatusCode, scan, err)
	}
	s.order(o.ID, "paid", "paid", 0)
	s.do("GET", "/v1/payments/"+p.PaymentID, nil, 200, &again)
	if again.State != "succeeded" || again.ChannelTxnID != scan.TradeNo {
		t.Fatalf("payment after the notification: %+v; want succeeded with trade_no %s", again, scan.TradeNo)
	}
	s.stock(stockJSON{Available: 7, Sold: 3})
	if err := s.srv.SetRefundMode(alipaytest.RefundDeferred); err != nil {
		t.Fatal(err)
	}

	// 1. A partial refund with a restock, accepted without money (fund_change N), still
	// processing at the first query, confirmed by the query after Alipay carried it out.
	var r1 refundJSON
	s.do("POST", "/v1/orders/"+o.ID+"/refunds", map[string]any{"amount": 1000, "restock": true,
		"items": []map[string]any{{"sku": "SKU-A", "quantity": 1}}}, 201, &r1)
	s.e.Drain(t)
	if f := s.refund(o.ID, r1.ID); f.State != "requested" || f.ProviderStatus != "fund_change=N" {
		t.Fatalf("refund 1 after alipay.trade.refund: %+v", f)
	}
	s.relay()
	if f := s.refund(o.ID, r1.ID); f.State != "requested" || f.ProviderStatus != "refund_status absent" {
		t.Fatalf("refund 1 while processing: %+v", f)
	}
	s.order(o.ID, "paid", "paid", 1000)
	s.stock(stockJSON{Available: 7, Sold: 3})
	if err := s.srv.SettleRefund(p.PaymentID, r1.ID); err != nil {
		t.Fatal(err)
	}
	s.relay()
	if f := s.refund(o.ID, r1.ID); f.State != "succeeded" || f.ProviderStatus != "" {
		t.Fatalf("refund 1 after REFUND_SUCCESS: %+v", f)
	}
	s.order(o.ID, "paid", "partially_refunded", 1000)
	s.stock(stockJSON{Available: 8, Sold: 2})

	// 2. A refund Alipay accepts and then fails (the seller's balance is short): the query
	// finds none, the refund asked again is refused, and its amount is refundable again.
	var r2 refundJSON
	s.do("POST", "/v1/orders/"+o.ID+"/refunds", map[string]any{"amount": 500}, 201, &r2)
	s.e.Drain(t)
	if f := s.refund(o.ID, r2.ID); f.State != "requested" || f.ProviderStatus != "fund_change=N" {
		t.Fatalf("refund 2 after alipay.trade.refund: %+v", f)
	}
	s.order(o.ID, "paid", "partially_refunded", 1500)
	if err := s.srv.FailRefund(p.PaymentID, r2.ID, "ACQ.SELLER_BALANCE_NOT_ENOUGH"); err != nil {
		t.Fatal(err)
	}
	s.relay()
	if f := s.refund(o.ID, r2.ID); f.State != "failed" || !strings.Contains(f.FailReason, "ACQ.SELLER_BALANCE_NOT_ENOUGH") {
		t.Fatalf("refund 2 after it failed: %+v", f)
	}
	s.order(o.ID, "paid", "partially_refunded", 1000)
	s.stock(stockJSON{Available: 8, Sold: 2})

	// 3. The rest (2000, which refund 2 no longer holds), with a restock: accepted without
	// money, then carried out; the order is refunded and every unit is back in stock.
	var r3 refundJSON
	s.do("POST", "/v1/orders/"+o.ID+"/refunds", map[string]any{"amount": 2000, "restock": true,
		"items": []map[string]any{{"sku": "SKU-A", "quantity": 2}}}, 201, &r3)
	s.e.Drain(t)
	if f := s.refund(o.ID, r3.ID); f.State != "requested" || f.ProviderStatus != "fund_change=N" {
		t.Fatalf("refund 3 after alipay.trade.refund: %+v", f)
	}
	s.order(o.ID, "refunding", "partially_refunded", 3000)
	s.stock(stockJSON{Available: 8, Sold: 2})
	if err := s.srv.SettleRefund(p.PaymentID, r3.ID); err != nil {
		t.Fatal(err)
	}
	s.relay()
	if f := s.refund(o.ID, r3.ID); f.State != "succeeded" {
		t.Fatalf("refund 3 after REFUND_SUCCESS: %+v", f)
	}
	s.order(o.ID, "refunded", "refunded", 3000)
	s.stock(stockJSON{Available: 10})
	tr, _ := s.srv.Trade(p.PaymentID)
	if tr.Status != alipay.TradeClosed || tr.Refunded != 3000 || tr.Refunds[r2.ID].Status != alipaytest.RefundFailed {
		t.Fatalf("trade at Alipay: %s refunded %d, refund 2 %+v", tr.Status, tr.Refunded, tr.Refunds[r2.ID])
	}
}
