package alipaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
)

// ScanResult is the answer of POST /qr/<token>, the buyer paying a trade: the trade after
// the payment and what became of the async notification.
type ScanResult struct {
	OutTradeNo  string `json:"out_trade_no"`
	TradeNo     string `json:"trade_no"`
	TradeStatus string `json:"trade_status"`
	TotalAmount string `json:"total_amount"`
	// NotifyURL is where the notification was posted ("" when the trade has none: no
	// notify_url and no DefaultNotifyURL); NotifyStatus and NotifyAck are the HTTP status
	// and body of the answer ("success" when the merchant took it), NotifyError the
	// transport error, if any.
	NotifyURL    string `json:"notify_url,omitempty"`
	NotifyStatus int    `json:"notify_status,omitempty"`
	NotifyAck    string `json:"notify_ack,omitempty"`
	NotifyError  string `json:"notify_error,omitempty"`
	// ReturnURL is, for page and wap pay, where Alipay sends the buyer's browser back: the
	// trade's return_url with the signed synchronous parameters.
	ReturnURL string `json:"return_url,omitempty"`
}

// Scan plays the buyer at the cashier: the trade whose QR code or cashier token is token
// is paid (WAIT_BUYER_PAY → TRADE_SUCCESS, a new trade_no), and its signed async
// notification (TRADE_SUCCESS, form-urlencoded, RSA2) is posted once to its notify_url
// (or DefaultNotifyURL), as Alipay does; a failed delivery is reported, not retried.
// Errors: no such token, or the trade is not waiting for payment.
func (s *Server) Scan(ctx context.Context, token string) (*ScanResult, error) {
	s.mu.Lock()
	no, ok := s.tokens[token]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("alipaytest: no trade with QR code token %q", token)
	}
	tr, err := s.Pay(no, 0)
	if err != nil {
		return nil, err
	}
	body, err := s.PaymentNotification(no)
	if err != nil {
		return nil, err
	}
	res := &ScanResult{OutTradeNo: tr.OutTradeNo, TradeNo: tr.TradeNo, TradeStatus: tr.Status, TotalAmount: yuan(tr.Total),
		NotifyURL: tr.NotifyURL}
	if res.NotifyURL == "" {
		res.NotifyURL = s.DefaultNotifyURL
	}
	if tr.ReturnURL != "" {
		res.ReturnURL = s.returnURL(tr)
	}
	if res.NotifyURL != "" {
		status, ack, err := Deliver(ctx, s.NotifyClient, res.NotifyURL, body)
		res.NotifyStatus, res.NotifyAck = status, ack
		if err != nil {
			res.NotifyError = err.Error()
		}
	}
	return res, nil
}

// returnURL is a paid page or wap trade's return_url with the synchronous parameters
// Alipay adds, signed with the imitation's key like a notification.
func (s *Server) returnURL(t Trade) string {
	method := "alipay.trade.page.pay.return"
	if t.Product == "wap" {
		method = "alipay.trade.wap.pay.return"
	}
	params := map[string]string{
		"charset": "utf-8", "out_trade_no": t.OutTradeNo, "method": method, "total_amount": yuan(t.Total),
		"trade_no": t.TradeNo, "auth_app_id": AppID, "version": "1.0", "app_id": AppID, "seller_id": SellerID,
		"timestamp": s.Now().In(beijing).Format(timeLayout),
	}
	q := url.Values{}
	for k, v := range params {
		q.Set(k, v)
	}
	q.Set("sign_type", "RSA2")
	q.Set("sign", rsaSign(s.alipayKey, content(params, "sign", "sign_type")))
	sep := "?"
	if strings.Contains(t.ReturnURL, "?") {
		sep = "&"
	}
	return t.ReturnURL + sep + q.Encode()
}

// serveScan answers POST /qr/<token>: 200 with the ScanResult as JSON, 404 for an unknown
// token, 409 for a trade that is not waiting for payment.
func (s *Server) serveScan(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	s.mu.Lock()
	_, known := s.tokens[token]
	s.mu.Unlock()
	if !known {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no trade with this QR code"})
		return
	}
	res, err := s.Scan(r.Context(), token)
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var cashierPage = template.Must(template.New("cashier").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>支付宝 (imitation) cashier</title></head>
<body>
<h1>支付宝 (imitation)</h1>
<p>Trade {{.OutTradeNo}}: ¥{{.Amount}}, {{.Status}}</p>
{{if .Waiting}}<form method="post" action="/qr/{{.Token}}"><button type="submit">确认付款 (pay)</button></form>{{end}}
</body></html>
`))

// renderCashier writes the cashier page of trade t.
func (s *Server) renderCashier(w http.ResponseWriter, t Trade) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = cashierPage.Execute(w, map[string]any{"OutTradeNo": t.OutTradeNo, "Amount": yuan(t.Total), "Status": t.Status,
		"Waiting": t.Status == alipay.TradeWaitBuyerPay, "Token": t.Token})
}

// serveCashier answers GET /qr/<token>: the page the Alipay app shows after a scan, whose
// form POSTs to the same URL to pay.
func (s *Server) serveCashier(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	no, ok := s.tokens[r.PathValue("token")]
	var t Trade
	if ok {
		t = *s.trades[no]
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no trade with this QR code", http.StatusNotFound)
		return
	}
	s.renderCashier(w, t)
}

// servePagePay answers GET /gateway.do, a signed alipay.trade.page.pay or wap.pay URL
// opened by the buyer's browser: the signature is checked like a call's, the trade is
// created (or found again by out_trade_no, for the same amount) with the URL's notify_url
// and return_url, and the cashier page is shown. Refusals are 400 pages with Alipay's
// error code.
func (s *Server) servePagePay(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	params := map[string]string{}
	for k, vs := range q {
		if len(vs) != 1 {
			http.Error(w, "ILLEGAL_ARGUMENT: "+k+" twice", http.StatusBadRequest)
			return
		}
		params[k] = vs[0]
	}
	method := params["method"]
	var biz map[string]string
	switch {
	case method != "alipay.trade.page.pay" && method != "alipay.trade.wap.pay":
		http.Error(w, "isv.invalid-method: "+method, http.StatusBadRequest)
		return
	case params["app_id"] != AppID:
		http.Error(w, "isv.invalid-app-id", http.StatusBadRequest)
		return
	case params["sign_type"] != "RSA2" || !rsaVerify(s.merchant, content(params, "sign"), params["sign"]):
		http.Error(w, "isv.invalid-signature: 验签出错", http.StatusBadRequest)
		return
	case unmarshalBiz(params["biz_content"], &biz) != nil:
		http.Error(w, "isv.invalid-parameter: biz_content", http.StatusBadRequest)
		return
	}
	product, wantCode := "page", "FAST_INSTANT_TRADE_PAY"
	if method == "alipay.trade.wap.pay" {
		product, wantCode = "wap", "QUICK_WAP_WAY"
	}
	total, err := channel.ParseDecimal(biz["total_amount"], "CNY")
	if err != nil || biz["out_trade_no"] == "" || biz["subject"] == "" || biz["product_code"] != wantCode {
		http.Error(w, "ACQ.INVALID_PARAMETER: 参数无效", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	t := s.trades[biz["out_trade_no"]]
	if t == nil {
		t = s.newTrade(biz["out_trade_no"], total, product, params["notify_url"], params["return_url"])
	}
	c := *t
	s.mu.Unlock()
	if c.Total != total {
		http.Error(w, "ACQ.CONTEXT_INCONSISTENT: 交易信息被篡改", http.StatusBadRequest)
		return
	}
	s.renderCashier(w, c)
}

// SetRefundMode sets how the refunds accepted from now on are carried out: RefundAtOnce
// (the default) or RefundDeferred. Errors: another mode.
func (s *Server) SetRefundMode(mode string) error {
	if mode != RefundAtOnce && mode != RefundDeferred {
		return fmt.Errorf("alipaytest: refund mode %q is not %s or %s", mode, RefundAtOnce, RefundDeferred)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundMode = mode
	return nil
}

// processing returns the processing refund outRequestNo of a payment's trade; s.mu is held.
func (s *Server) processing(paymentID, outRequestNo string) (*Trade, error) {
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if !ok {
		return nil, fmt.Errorf("alipaytest: no trade for payment %s", paymentID)
	}
	r, ok := t.Refunds[outRequestNo]
	if !ok || r.Status != RefundProcessing {
		return nil, fmt.Errorf("alipaytest: refund %s of %s is not processing (%q)", outRequestNo, paymentID, r.Status)
	}
	return t, nil
}

// SettleRefund carries out a processing refund (see RefundDeferred): the money goes back,
// the refund query answers refund_status REFUND_SUCCESS, and a trade refunded in full
// closes. paymentID may be the payment id or its out_trade_no. No notification is sent
// (RefundNotification makes one). Errors: no such processing refund.
func (s *Server) SettleRefund(paymentID, outRequestNo string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.processing(paymentID, outRequestNo)
	if err != nil {
		return err
	}
	s.settle(t, outRequestNo)
	return nil
}

// FailRefund makes a processing refund fail with sub_code subCode (say
// "ACQ.SELLER_BALANCE_NOT_ENOUGH", the seller's balance cannot cover it): no money moves,
// the refund query finds no refund under its out_request_no, and alipay.trade.refund asked
// again with it answers 40004 subCode. Errors: no such processing refund.
func (s *Server) FailRefund(paymentID, outRequestNo, subCode string) error {
	if subCode == "" {
		return fmt.Errorf("alipaytest: FailRefund needs a sub_code")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.processing(paymentID, outRequestNo)
	if err != nil {
		return err
	}
	r := t.Refunds[outRequestNo]
	r.Status, r.FailCode = RefundFailed, subCode
	t.Refunds[outRequestNo] = r
	return nil
}

// serveRefundMode answers POST /imitation/refund-mode?mode=at_once|deferred: 204, or 400.
func (s *Server) serveRefundMode(w http.ResponseWriter, r *http.Request) {
	if err := s.SetRefundMode(r.URL.Query().Get("mode")); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// serveRefundOutcome answers POST /imitation/refunds/settle and /imitation/refunds/fail
// (?out_trade_no=…&out_request_no=…, and sub_code for fail, default
// ACQ.SELLER_BALANCE_NOT_ENOUGH): 204, or 404 when no such refund is processing.
func (s *Server) serveRefundOutcome(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var err error
	switch r.PathValue("outcome") {
	case "settle":
		err = s.SettleRefund(q.Get("out_trade_no"), q.Get("out_request_no"))
	case "fail":
		code := q.Get("sub_code")
		if code == "" {
			code = "ACQ.SELLER_BALANCE_NOT_ENOUGH"
		}
		err = s.FailRefund(q.Get("out_trade_no"), q.Get("out_request_no"), code)
	default:
		http.Error(w, "settle or fail", http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
