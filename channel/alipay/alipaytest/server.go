package alipaytest

import (
	"bytes"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
)

// Trade is the imitation's state of one trade. Amounts are in fen (minor units of CNY).
type Trade struct {
	OutTradeNo string
	TradeNo    string // set when paid
	Status     string // alipay.TradeWaitBuyerPay, TradeSuccess, TradeFinished or TradeClosed
	Total      int64
	Refunded   int64
	NotifyURL  string
	QRCode     string
	CreatedAt  time.Time
	PaidAt     time.Time
	ClosedAt   time.Time
	// Refunds maps an out_request_no to the refund it made.
	Refunds map[string]Refund
}

// Refund is one refund the imitation made.
type Refund struct {
	OutRequestNo string
	Amount       int64
	At           time.Time
}

// Call is one OpenAPI call the imitation received.
type Call struct {
	Method     string
	OutTradeNo string
	// Replay is true for a refund whose out_request_no an earlier refund used (no money moved).
	Replay bool
}

// Server is the imitation Alipay. Its zero value is not usable: call NewServer.
type Server struct {
	// URL is the OpenAPI gateway's address (the adapter's Config.BaseURL).
	URL string

	srv         *httptest.Server
	alipayKey   *rsa.PrivateKey
	merchant    *rsa.PublicKey
	mu          sync.Mutex
	trades      map[string]*Trade // by out_trade_no
	calls       []Call
	seq         int64
	unavailable map[string]int    // method → answers of 20000 still to give
	webhookMu   sync.Mutex        // held by Webhook while it plays an outcome
	webhooks    map[string][]byte // "<payment id>/<status>" → the notification (Webhook)
	// Now is the imitation's clock (notification times, trade times); default time.Now.
	Now func() time.Time
}

// NewServer starts an imitation Alipay on a local port. Close it when done.
func NewServer() *Server {
	s := &Server{
		alipayKey:   AlipayKey(),
		merchant:    &MerchantKey().PublicKey,
		trades:      map[string]*Trade{},
		unavailable: map[string]int{},
		Now:         time.Now,
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL + "/gateway.do"
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Config returns an adapter configuration for this imitation: its app and seller ids, the
// test keys and its URL; the caller may set NotifyURL and the rest.
func (s *Server) Config() alipay.Config {
	return alipay.Config{
		AppID: AppID, SellerID: SellerID, PrivateKey: MerchantKey(),
		AlipayPublicKey: &s.alipayKey.PublicKey, BaseURL: s.URL, HTTPClient: s.srv.Client(),
	}
}

// Trade returns a copy of a payment's trade and whether it exists.
func (s *Server) Trade(paymentID string) (Trade, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if !ok {
		return Trade{}, false
	}
	c := *t
	c.Refunds = maps.Clone(t.Refunds)
	return c, true
}

// Calls returns the OpenAPI calls received so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// FailNext makes the next n calls of method (say "alipay.trade.close") answer code 20000
// (service unavailable), signed: the caller cannot tell what happened.
func (s *Server) FailNext(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unavailable[method] = n
}

// Pay plays the buyer paying a payment's trade: WAIT_BUYER_PAY → TRADE_SUCCESS with a new
// trade_no. A payment never precreated is created paid for amount fen (the buyer scanned
// a code the imitation never saw; amount is ignored otherwise). Errors: the trade is not
// waiting for payment.
func (s *Server) Pay(paymentID string, amount int64) (Trade, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	no := channel.OutTradeNo(paymentID)
	t, ok := s.trades[no]
	if !ok {
		t = &Trade{OutTradeNo: no, Status: alipay.TradeWaitBuyerPay, Total: amount, CreatedAt: s.Now(), Refunds: map[string]Refund{}}
		s.trades[no] = t
	}
	if t.Status != alipay.TradeWaitBuyerPay {
		return Trade{}, fmt.Errorf("alipaytest: trade %s is %s, not waiting for payment", no, t.Status)
	}
	s.seq++
	t.Status, t.TradeNo, t.PaidAt = alipay.TradeSuccess, fmt.Sprintf("2026113022001%011d", s.seq), s.Now()
	return *t, nil
}

// PayLate plays money that arrives although the trade was closed (the buyer paid in the
// instant of the close, or a simulation plays a late payment): like Pay, from
// WAIT_BUYER_PAY or TRADE_CLOSED. Errors: the trade is paid already.
func (s *Server) PayLate(paymentID string, amount int64) (Trade, error) {
	s.mu.Lock()
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if ok && t.Status == alipay.TradeClosed && t.TradeNo == "" {
		t.Status = alipay.TradeWaitBuyerPay
	}
	s.mu.Unlock()
	return s.Pay(paymentID, amount)
}

// CloseTrade plays Alipay closing a trade nobody paid (its timeout_express passed):
// WAIT_BUYER_PAY → TRADE_CLOSED; a trade never precreated is created closed for amount
// fen. Errors: the trade is paid.
func (s *Server) CloseTrade(paymentID string, amount int64) (Trade, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	no := channel.OutTradeNo(paymentID)
	t, ok := s.trades[no]
	if !ok {
		t = &Trade{OutTradeNo: no, Status: alipay.TradeWaitBuyerPay, Total: amount, CreatedAt: s.Now(), Refunds: map[string]Refund{}}
		s.trades[no] = t
	}
	switch t.Status {
	case alipay.TradeWaitBuyerPay:
		t.Status, t.ClosedAt = alipay.TradeClosed, s.Now()
	case alipay.TradeClosed:
		if t.TradeNo != "" {
			return Trade{}, fmt.Errorf("alipaytest: trade %s was paid (and refunded)", no)
		}
	default:
		return Trade{}, fmt.Errorf("alipaytest: trade %s is %s", no, t.Status)
	}
	return *t, nil
}

// Finish moves a paid trade to TRADE_FINISHED (its refund period ended). Errors: the
// trade is not TRADE_SUCCESS or not TRADE_CLOSED after a refund.
func (s *Server) Finish(paymentID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[channel.OutTradeNo(paymentID)]
	if !ok || t.TradeNo == "" {
		return fmt.Errorf("alipaytest: trade of %s was never paid", paymentID)
	}
	t.Status = alipay.TradeFinished
	return nil
}

// serveHTTP answers one OpenAPI call.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	params := map[string]string{}
	for k := range r.PostForm {
		params[k] = r.PostForm.Get(k)
	}
	method := params["method"]
	answer := func(fields map[string]any) {
		key := strings.ReplaceAll(method, ".", "_") + "_response"
		if fields["code"] != "10000" && method == "" {
			key = "error_response"
		}
		inner, _ := json.Marshal(fields)
		var b bytes.Buffer
		fmt.Fprintf(&b, `{"%s":%s,"sign":"%s"}`, key, inner, rsaSign(s.alipayKey, string(inner)))
		w.Header().Set("Content-Type", "text/html;charset=utf-8") // as Alipay's gateway does
		_, _ = w.Write(b.Bytes())
	}
	fail := func(code, msg, sub, subMsg string) {
		answer(map[string]any{"code": code, "msg": msg, "sub_code": sub, "sub_msg": subMsg})
	}
	switch {
	case params["app_id"] != AppID:
		fail("40002", "Invalid Arguments", "isv.invalid-app-id", "无效的AppID参数")
		return
	case params["sign_type"] != "RSA2":
		fail("40002", "Invalid Arguments", "isv.invalid-signature-type", "无效的签名类型")
		return
	case !rsaVerify(s.merchant, content(params, "sign"), params["sign"]):
		fail("40002", "Invalid Arguments", "isv.invalid-signature", "验签出错")
		return
	}
	var biz map[string]string
	if err := json.Unmarshal([]byte(params["biz_content"]), &biz); err != nil {
		fail("40002", "Invalid Arguments", "isv.invalid-parameter", "biz_content is not JSON")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Method: method, OutTradeNo: biz["out_trade_no"]}
	defer func() { s.calls = append(s.calls, call) }()
	if s.unavailable[method] > 0 {
		s.unavailable[method]--
		fail("20000", "Service Currently Unavailable", "isp.unknow-error", "系统繁忙")
		return
	}
	t := s.trades[biz["out_trade_no"]]
	switch method {
	case "alipay.trade.precreate":
		total, err := channel.ParseDecimal(biz["total_amount"], "CNY")
		if err != nil || biz["out_trade_no"] == "" || biz["subject"] == "" {
			fail("40004", "Business Failed", "ACQ.INVALID_PARAMETER", "参数无效")
			return
		}
		if t == nil {
			s.seq++
			t = &Trade{OutTradeNo: biz["out_trade_no"], Status: alipay.TradeWaitBuyerPay, Total: total,
				NotifyURL: params["notify_url"], QRCode: fmt.Sprintf("https://qr.alipay.com/bax%08d", s.seq),
				CreatedAt: s.Now(), Refunds: map[string]Refund{}}
			s.trades[t.OutTradeNo] = t
		}
		switch {
		case t.Status == alipay.TradeSuccess || t.Status == alipay.TradeFinished:
			fail("40004", "Business Failed", alipay.SubTradeHasSuccess, "交易已被支付")
		case t.Status == alipay.TradeClosed:
			fail("40004", "Business Failed", "ACQ.TRADE_HAS_CLOSE", "交易已经关闭")
		case t.Total != total:
			fail("40004", "Business Failed", "ACQ.CONTEXT_INCONSISTENT", "交易信息被篡改")
		default:
			answer(map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "qr_code": t.QRCode})
		}
	case "alipay.trade.query":
		if t == nil {
			fail("40004", "Business Failed", alipay.SubTradeNotExist, "交易不存在")
			return
		}
		answer(map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo,
			"trade_status": t.Status, "total_amount": yuan(t.Total)})
	case "alipay.trade.close":
		switch {
		case t == nil:
			fail("40004", "Business Failed", alipay.SubTradeNotExist, "交易不存在")
		case t.Status == alipay.TradeSuccess || t.Status == alipay.TradeFinished:
			fail("40004", "Business Failed", alipay.SubTradeStatusError, "交易状态不合法")
		default:
			if t.Status == alipay.TradeWaitBuyerPay {
				t.Status, t.ClosedAt = alipay.TradeClosed, s.Now()
			}
			answer(map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo})
		}
	case "alipay.trade.refund":
		amount, err := channel.ParseDecimal(biz["refund_amount"], "CNY")
		switch {
		case err != nil || biz["out_request_no"] == "" || amount <= 0:
			fail("40004", "Business Failed", "ACQ.INVALID_PARAMETER", "参数无效")
			return
		case t == nil:
			fail("40004", "Business Failed", alipay.SubTradeNotExist, "交易不存在")
			return
		}
		if prev, ok := t.Refunds[biz["out_request_no"]]; ok {
			call.Replay = true
			if prev.Amount != amount {
				fail("40004", "Business Failed", "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
				return
			}
			answer(map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo,
				"fund_change": "N", "refund_fee": yuan(t.Refunded)})
			return
		}
		switch {
		case t.Status != alipay.TradeSuccess:
			fail("40004", "Business Failed", alipay.SubTradeStatusError, "交易状态不合法")
			return
		case t.Refunded+amount > t.Total:
			fail("40004", "Business Failed", "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
			return
		}
		t.Refunded += amount
		t.Refunds[biz["out_request_no"]] = Refund{OutRequestNo: biz["out_request_no"], Amount: amount, At: s.Now()}
		if t.Refunded == t.Total {
			t.Status, t.ClosedAt = alipay.TradeClosed, s.Now()
		}
		answer(map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo,
			"fund_change": "Y", "refund_fee": yuan(t.Refunded)})
	default:
		fail("40004", "Business Failed", "isv.invalid-method", "不存在的方法名")
	}
}

// yuan formats fen as Alipay's decimal yuan.
func yuan(fen int64) string {
	return strconv.FormatInt(fen/100, 10) + "." + fmt.Sprintf("%02d", fen%100)
}
