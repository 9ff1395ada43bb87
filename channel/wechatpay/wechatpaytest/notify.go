package wechatpaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
)

// NotifyOptions shape a minted notification.
type NotifyOptions struct {
	// At is the Wechatpay-Timestamp and create_time; zero means the server's Now.
	At time.Time
	// Indent formats the body with whitespace (as a pretty-printing proxy would send it
	// before signing); the signature covers the bytes as sent either way.
	Indent bool
}

// Notification returns a signed notification: an envelope with a new id, event_type, the
// resource (its JSON) encrypted with AEAD_AES_256_GCM under APIv3Key with associatedData,
// and the Wechatpay-* headers over the body.
func (s *Server) Notification(eventType, associatedData string, resource any, opt NotifyOptions) (http.Header, []byte) {
	at := opt.At
	if at.IsZero() {
		at = s.Now()
	}
	plain, err := json.Marshal(resource)
	if err != nil {
		panic(err)
	}
	nonce, ct := encrypt(plain, associatedData)
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("EV-2026113000%010d", s.seq)
	s.mu.Unlock()
	originalType := "transaction"
	if associatedData == "refund" {
		originalType = "refund"
	}
	env := map[string]any{
		"id": id, "create_time": at.In(beijing).Format(time.RFC3339), "resource_type": "encrypt-resource",
		"event_type": eventType, "summary": "支付成功",
		"resource": map[string]string{"algorithm": "AEAD_AES_256_GCM", "ciphertext": ct,
			"associated_data": associatedData, "original_type": originalType, "nonce": nonce},
	}
	var body []byte
	if opt.Indent {
		body, err = json.MarshalIndent(env, "", "    ")
	} else {
		body, err = json.Marshal(env)
	}
	if err != nil {
		panic(err)
	}
	return s.Sign(body, at), body
}

var beijing = time.FixedZone("CST", 8*60*60)

// TransactionNotification returns a signed TRANSACTION.SUCCESS notification of a paid
// payment's order. Errors: no such order, or it is not paid.
func (s *Server) TransactionNotification(paymentID string, opt NotifyOptions) (http.Header, []byte, error) {
	s.mu.Lock()
	o, ok := s.orders[channel.OutTradeNo(paymentID)]
	if !ok || o.TransactionID == "" {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("wechatpaytest: payment %s is not paid", paymentID)
	}
	res := s.transactionJSON(o)
	res["trade_state"] = "SUCCESS"
	s.mu.Unlock()
	h, b := s.Notification(wechatpay.EventTransactionSuccess, "transaction", res, opt)
	return h, b, nil
}

// RefundNotification returns a signed REFUND.* notification (eventType
// wechatpay.EventRefundSuccess, EventRefundAbnormal or EventRefundClosed) of the refund
// made with outRefundNo. Errors: no such order or refund.
func (s *Server) RefundNotification(paymentID, outRefundNo, eventType string, opt NotifyOptions) (http.Header, []byte, error) {
	s.mu.Lock()
	o, ok := s.orders[channel.OutTradeNo(paymentID)]
	var r Refund
	if ok {
		r, ok = o.Refunds[outRefundNo]
	}
	if !ok {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("wechatpaytest: no refund %s of payment %s", outRefundNo, paymentID)
	}
	status := map[string]string{wechatpay.EventRefundSuccess: "SUCCESS", wechatpay.EventRefundAbnormal: "ABNORMAL",
		wechatpay.EventRefundClosed: "CLOSED"}[eventType]
	res := map[string]any{
		"mchid": MchID, "out_trade_no": o.OutTradeNo, "transaction_id": o.TransactionID, "out_refund_no": r.OutRefundNo,
		"refund_id": r.RefundID, "refund_status": status, "user_received_account": "支付用户零钱",
		"amount": map[string]int64{"total": o.Total, "refund": r.Amount, "payer_total": o.PayerTotal, "payer_refund": r.Amount},
	}
	if status == "SUCCESS" {
		res["success_time"] = r.At.In(beijing).Format(time.RFC3339)
	}
	s.mu.Unlock()
	h, b := s.Notification(eventType, "refund", res, opt)
	return h, b, nil
}

// Probe returns a signature probe as WeChat Pay sends them: a well-formed notification
// whose Wechatpay-Signature starts "WECHATPAY/SIGNTEST/"; a verifier must refuse it.
func (s *Server) Probe() (http.Header, []byte) {
	h, body := s.Notification(wechatpay.EventTransactionSuccess, "transaction", map[string]string{}, NotifyOptions{})
	h.Set("Wechatpay-Signature", "WECHATPAY/SIGNTEST/"+h.Get("Wechatpay-Signature"))
	return h, body
}

// Deliver posts a notification to a notify URL as WeChat Pay does and returns the
// answer's status and body (204 and no body when handled).
func Deliver(ctx context.Context, client *http.Client, notifyURL string, h http.Header, body []byte) (status int, answer []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, notifyURL, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, answer, err
}
