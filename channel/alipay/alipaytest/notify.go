package alipaytest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
)

const timeLayout = "2006-01-02 15:04:05"

var beijing = time.FixedZone("CST", 8*60*60)

// SignNotification returns a notification body as Alipay posts it: params plus sign_type
// RSA2 and the imitation's sign over them (sign and sign_type left out of the signed
// text), form-urlencoded in sorted key order.
func (s *Server) SignNotification(params map[string]string) []byte {
	form := url.Values{}
	for k, v := range params {
		form.Set(k, v)
	}
	form.Set("sign_type", "RSA2")
	form.Set("sign", rsaSign(s.alipayKey, content(params, "sign", "sign_type")))
	return []byte(form.Encode())
}

// notifyBase is the part common to every notification of a trade; s.mu is held.
func (s *Server) notifyBase(t *Trade) map[string]string {
	s.seq++
	now := s.Now().In(beijing)
	p := map[string]string{
		"notify_time":  now.Format(timeLayout),
		"notify_type":  "trade_status_sync",
		"notify_id":    fmt.Sprintf("2026113000222%011d", s.seq),
		"charset":      "utf-8",
		"version":      "1.0",
		"app_id":       AppID,
		"seller_id":    SellerID,
		"seller_email": "shop@example.com",
		"buyer_id":     "2088102122524333",
		"out_trade_no": t.OutTradeNo,
		"trade_no":     t.TradeNo,
		"trade_status": t.Status,
		"total_amount": yuan(t.Total),
		"subject":      "orderly order",
		"gmt_create":   t.CreatedAt.In(beijing).Format(timeLayout),
	}
	if t.TradeNo != "" {
		p["receipt_amount"] = yuan(t.Total)
		p["buyer_pay_amount"] = yuan(t.Total)
		p["gmt_payment"] = t.PaidAt.In(beijing).Format(timeLayout)
		p["fund_bill_list"] = fmt.Sprintf(`[{"amount":"%s","fundChannel":"ALIPAYACCOUNT"}]`, yuan(t.Total))
	}
	if t.Status == alipay.TradeClosed {
		p["gmt_close"] = t.ClosedAt.In(beijing).Format(timeLayout)
	}
	return p
}

// PaymentNotification returns a new signed notification of a payment's trade in its
// current state (TRADE_SUCCESS after Pay, TRADE_FINISHED after Finish, TRADE_CLOSED after a
// close), without refund fields, with a new notify_id. Send the same bytes again to play a
// retry. Errors: no such trade.
func (s *Server) PaymentNotification(paymentID string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if !ok {
		return nil, fmt.Errorf("alipaytest: no trade for payment %s", paymentID)
	}
	return s.SignNotification(s.notifyBase(t)), nil
}

// RefundNotification returns a new signed notification of the refund made with
// out_request_no outRequestNo, once its money went back: the trade's status (TRADE_SUCCESS after a partial refund,
// TRADE_CLOSED after a full one), refund_fee (the total refunded so far), gmt_refund and
// out_biz_no. Errors: no such trade or refund.
func (s *Server) RefundNotification(paymentID, outRequestNo string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if !ok {
		return nil, fmt.Errorf("alipaytest: no trade for payment %s", paymentID)
	}
	r, ok := t.Refunds[outRequestNo]
	if !ok || r.Status != RefundDone {
		return nil, fmt.Errorf("alipaytest: no refund %s done on payment %s", outRequestNo, paymentID)
	}
	p := s.notifyBase(t)
	p["refund_fee"] = yuan(t.Refunded)
	p["gmt_refund"] = r.At.In(beijing).Format("2006-01-02 15:04:05.000")
	p["out_biz_no"] = outRequestNo
	return s.SignNotification(p), nil
}

// Deliver posts a notification body to a notify URL as Alipay does and returns the
// answer's status and body (orderly's ack: "success" when handled).
func Deliver(ctx context.Context, client *http.Client, notifyURL string, body []byte) (status int, ack string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, notifyURL, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(b), err
}

// Reencode returns the same notification with other bytes, as a proxy or another client
// library might send it: the fields in another order (shuffled with seed) and the values
// percent-encoded differently (every byte of some values as %XX in upper or lower case, a
// space as %20 instead of '+'). The parameters, and so the signature, are the same.
func Reencode(body []byte, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) //nolint:gosec // G404: seeded for reproducible re-encodings, never a secret
	pairs := strings.Split(string(body), "&")
	r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	for i, pair := range pairs {
		k, v, _ := strings.Cut(pair, "=")
		dv, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		switch r.IntN(3) {
		case 0:
			v = hexAll(dv, "%%%02X")
		case 1:
			v = hexAll(dv, "%%%02x")
		default:
			v = strings.ReplaceAll(url.QueryEscape(dv), "+", "%20")
		}
		pairs[i] = k + "=" + v
	}
	return []byte(strings.Join(pairs, "&"))
}

func hexAll(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}
