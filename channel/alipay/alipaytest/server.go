package alipaytest

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"maps"
	"net"
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
	ReturnURL  string // page and wap pay: where the cashier sends the buyer back
	// Product is how the trade was created: "qr" (precreate), "page" or "wap".
	Product   string
	QRCode    string // the precreated code, an URL of this imitation (/qr/<token>)
	Token     string // the trade's cashier token: /qr/<token>
	CreatedAt time.Time
	PaidAt    time.Time
	ClosedAt  time.Time
	// Refunds maps an out_request_no to the refund it made.
	Refunds map[string]Refund
}

// Refund is one refund the imitation accepted.
type Refund struct {
	OutRequestNo string
	Amount       int64
	At           time.Time // when it was accepted, then when money went back
	Status       string    // RefundProcessing, RefundDone or RefundFailed
	// FailCode is the sub_code of a failed refund, answered when the refund is asked again.
	FailCode string
}

// Refund statuses (Refund.Status).
const (
	RefundProcessing = "processing" // accepted, no money moved yet: fund_change N, no refund_status
	RefundDone       = "done"       // money went back: refund_status REFUND_SUCCESS
	RefundFailed     = "failed"     // Alipay gave up: the refund query finds none
)

// Refund modes (Server.SetRefundMode).
const (
	// RefundAtOnce: an accepted refund moves money in the call (fund_change Y).
	RefundAtOnce = "at_once"
	// RefundDeferred: an accepted refund answers fund_change N and stays processing until
	// SettleRefund or FailRefund.
	RefundDeferred = "deferred"
)

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
	tokens      map[string]string // cashier token → out_trade_no
	refundMode  string
	// DefaultNotifyURL is where notifications of trades created without notify_url go (the
	// app's notify URL set in Alipay's console); "" sends none.
	DefaultNotifyURL string
	// NotifyClient delivers the async notifications; default a client with a 10 s timeout.
	NotifyClient *http.Client
	// Now is the imitation's clock (notification times, trade times); default time.Now.
	Now func() time.Time
}

// NewServer starts an imitation Alipay on a local port. Close it when done.
func NewServer() *Server {
	s, err := NewServerAt("127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("alipaytest: %v", err))
	}
	return s
}

// NewServerAt starts an imitation Alipay listening on addr ("127.0.0.1:9010"; port 0
// picks one). It serves:
//   - POST /gateway.do: the OpenAPI (precreate, query, close, refund, fastpay.refund.query);
//   - GET /gateway.do?method=alipay.trade.page.pay|wap.pay&…&sign=…: the cashier page of
//     a signed page or wap pay URL (it creates the trade);
//   - GET /qr/<token>: what the Alipay app shows for a QR code or the cashier; POST
//     /qr/<token>: the buyer pays (see Scan);
//   - POST /imitation/refund-mode?mode=at_once|deferred and POST
//     /imitation/refunds/settle|fail?out_trade_no=…&out_request_no=…[&sub_code=…]: plays
//     for refunds (SetRefundMode, SettleRefund, FailRefund).
//
// Errors: addr cannot be listened on. Close it when done.
func NewServerAt(addr string) (*Server, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("alipaytest: listen on %s: %w", addr, err)
	}
	s := &Server{
		alipayKey:    AlipayKey(),
		merchant:     &MerchantKey().PublicKey,
		trades:       map[string]*Trade{},
		unavailable:  map[string]int{},
		tokens:       map[string]string{},
		refundMode:   RefundAtOnce,
		NotifyClient: &http.Client{Timeout: 10 * time.Second},
		Now:          time.Now,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /gateway.do", s.serveHTTP)
	mux.HandleFunc("GET /gateway.do", s.servePagePay)
	mux.HandleFunc("GET /qr/{token}", s.serveCashier)
	mux.HandleFunc("POST /qr/{token}", s.serveScan)
	mux.HandleFunc("POST /imitation/refund-mode", s.serveRefundMode)
	mux.HandleFunc("POST /imitation/refunds/{outcome}", s.serveRefundOutcome)
	s.srv = httptest.NewUnstartedServer(mux)
	_ = s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL + "/gateway.do"
	return s, nil
}

// BaseURL is the imitation's root, "http://127.0.0.1:PORT".
func (s *Server) BaseURL() string { return s.srv.URL }

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
	if err := unmarshalBiz(params["biz_content"], &biz); err != nil {
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
			t = s.newTrade(biz["out_trade_no"], total, "qr", params["notify_url"], "")
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
		key := biz["out_request_no"]
		switch {
		case err != nil || key == "" || amount <= 0:
			fail("40004", "Business Failed", "ACQ.INVALID_PARAMETER", "参数无效")
			return
		case t == nil:
			fail("40004", "Business Failed", alipay.SubTradeNotExist, "交易不存在")
			return
		}
		refunded := func(fundChange string) {
			fields := map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo,
				"buyer_user_id": "2088102122524333", "fund_change": fundChange, "refund_fee": yuan(t.Refunded)}
			if fundChange == "Y" {
				fields["gmt_refund_pay"] = t.Refunds[key].At.In(beijing).Format(timeLayout)
			}
			answer(fields)
		}
		if prev, ok := t.Refunds[key]; ok {
			switch {
			case prev.Amount != amount:
				fail("40004", "Business Failed", "ACQ.DISCORDANT_REPEAT_REQUEST", "请求信息不一致")
			case prev.Status == RefundFailed:
				// Asked again after it failed: tried again, and it fails for the same cause.
				fail("40004", "Business Failed", prev.FailCode, "退款失败")
			default:
				call.Replay = true // done or still processing: no money moves in this call
				refunded("N")
			}
			return
		}
		switch {
		case t.Status != alipay.TradeSuccess:
			fail("40004", "Business Failed", alipay.SubTradeStatusError, "交易状态不合法")
			return
		case t.Refunded+t.refunding()+amount > t.Total:
			fail("40004", "Business Failed", "ACQ.REFUND_AMT_NOT_EQUAL_TOTAL", "退款金额超限")
			return
		}
		t.Refunds[key] = Refund{OutRequestNo: key, Amount: amount, At: s.Now(), Status: RefundProcessing}
		if s.refundMode == RefundDeferred {
			refunded("N")
			return
		}
		s.settle(t, key)
		refunded("Y")
	case "alipay.trade.fastpay.refund.query":
		if t == nil {
			fail("40004", "Business Failed", alipay.SubTradeNotExist, "交易不存在")
			return
		}
		r, ok := t.Refunds[biz["out_request_no"]]
		if !ok || r.Status == RefundFailed {
			// Not received, or failed: the docs' "没有查询到", no refund in the answer.
			answer(map[string]any{"code": "10000", "msg": "Success"})
			return
		}
		fields := map[string]any{"code": "10000", "msg": "Success", "out_trade_no": t.OutTradeNo, "trade_no": t.TradeNo,
			"out_request_no": r.OutRequestNo, "total_amount": yuan(t.Total), "refund_amount": yuan(r.Amount)}
		if r.Status == RefundDone {
			fields["refund_status"] = alipay.RefundSuccess
			fields["gmt_refund_pay"] = r.At.In(beijing).Format(timeLayout)
		}
		answer(fields)
	default:
		fail("40004", "Business Failed", "isv.invalid-method", "不存在的方法名")
	}
}

// newTrade records a trade waiting for payment, with its cashier token; s.mu is held.
func (s *Server) newTrade(outTradeNo string, total int64, product, notifyURL, returnURL string) *Trade {
	s.seq++
	token := fmt.Sprintf("bax%08d", s.seq)
	t := &Trade{OutTradeNo: outTradeNo, Status: alipay.TradeWaitBuyerPay, Total: total, Product: product,
		NotifyURL: notifyURL, ReturnURL: returnURL, Token: token, CreatedAt: s.Now(), Refunds: map[string]Refund{}}
	if product == "qr" {
		t.QRCode = s.srv.URL + "/qr/" + token // stands for https://qr.alipay.com/<token>
	}
	s.trades[outTradeNo] = t
	s.tokens[token] = outTradeNo
	return t
}

// refunding is the sum of the trade's refunds still processing: not refundable again.
func (t *Trade) refunding() int64 {
	var n int64
	for _, r := range t.Refunds {
		if r.Status == RefundProcessing {
			n += r.Amount
		}
	}
	return n
}

// settle moves money for a processing refund; s.mu is held. A trade refunded in full
// closes.
func (s *Server) settle(t *Trade, key string) {
	r := t.Refunds[key]
	r.Status, r.At = RefundDone, s.Now()
	t.Refunds[key] = r
	t.Refunded += r.Amount
	if t.Refunded == t.Total {
		t.Status, t.ClosedAt = alipay.TradeClosed, s.Now()
	}
}

// unmarshalBiz decodes biz_content, whose values may be strings or other JSON (the
// query_options array): those are kept as their JSON text.
func unmarshalBiz(text string, biz *map[string]string) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return err
	}
	*biz = make(map[string]string, len(raw))
	for k, v := range raw {
		var str string
		if json.Unmarshal(v, &str) == nil {
			(*biz)[k] = str
		} else {
			(*biz)[k] = string(v)
		}
	}
	return nil
}

// yuan formats fen as Alipay's decimal yuan.
func yuan(fen int64) string {
	return strconv.FormatInt(fen/100, 10) + "." + fmt.Sprintf("%02d", fen%100)
}
