package wechatpaytest

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
)

// Order is the imitation's state of one order. Amounts are in minor units of Currency.
type Order struct {
	OutTradeNo    string
	TransactionID string // set when paid
	// TradeType is NATIVE (a code_url to scan) or JSAPI (a prepay_id for the payer's client).
	TradeType string
	// State is NOTPAY, SUCCESS, REFUND (paid, then refunded), CLOSED or PAYERROR.
	State       string
	Total       int64
	PayerTotal  int64 // what the buyer paid: less than Total after a discount WeChat Pay funded
	Currency    string
	NotifyURL   string
	CodeURL     string // Native orders
	PrepayID    string // JSAPI orders
	OpenID      string // JSAPI orders: payer.openid, the only WeChat user who may pay it
	SuccessTime time.Time
	Refunded    int64
	// Refunds maps an out_refund_no to the refund it made.
	Refunds map[string]Refund
}

// Refund is one refund the imitation accepted.
type Refund struct {
	OutRefundNo string
	RefundID    string
	Amount      int64
	At          time.Time // accepted; also the success_time of the minted REFUND.SUCCESS
	// Status is PROCESSING, SUCCESS, CLOSED or ABNORMAL (see HoldRefunds, SettleRefund).
	Status    string
	NotifyURL string
}

// Call is one API call the imitation received and authenticated.
type Call struct {
	Method     string // "native", "jsapi", "query", "close", "refund" or "refund-query"
	OutTradeNo string
	// Replay is true for a refund whose out_refund_no an earlier refund used (no money moved).
	Replay bool
}

// Server is the imitation WeChat Pay. Its zero value is not usable: call NewServer.
type Server struct {
	// URL is the API host (the adapter's Config.BaseURL).
	URL string
	// UsePublicKey makes the imitation sign with its WeChat Pay public key (serial
	// PublicKeyID) instead of its platform certificate; set it before use.
	UsePublicKey bool
	// Now is the imitation's clock (signatures, times); default time.Now. Set it before use.
	Now func() time.Time

	srv         *httptest.Server
	merchant    *rsa.PublicKey
	platformKey *rsa.PrivateKey
	pubKey      *rsa.PrivateKey
	mu          sync.Mutex
	orders      map[string]*Order // by out_trade_no
	calls       []Call
	seq         int64
	unavailable map[string]int     // call → 500 SYSTEM_ERROR answers still to give
	holdRefunds bool               // HoldRefunds
	notifier                       // Notify: deliveries to notify URLs
	webhookMu   sync.Mutex         // held by Webhook while it plays an outcome
	webhooks    map[string]webhook // "<payment id>/<status>" → the notification (Webhook)
}

// NewServer starts an imitation WeChat Pay on a local port. Close it when done.
func NewServer() *Server { return newServer(nil) }

// Listen starts an imitation WeChat Pay on addr ("127.0.0.1:9001"; port 0 picks one, URL
// says which), for a server in another process to call (`--wechat-api-url`). Close it
// when done. Errors: the address cannot be listened on.
func Listen(addr string) (*Server, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wechatpaytest: %w", err)
	}
	return newServer(l), nil
}

// newServer starts the imitation on l, or on a local port when l is nil.
func newServer(l net.Listener) *Server {
	if certSerial() != PlatformSerial {
		panic("wechatpaytest: committed certificate does not have serial " + PlatformSerial)
	}
	s := &Server{
		Now: time.Now, merchant: &MerchantKey().PublicKey, platformKey: PlatformKey(), pubKey: PublicKeyKey(),
		orders: map[string]*Order{}, unavailable: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/pay/transactions/native", s.auth("native", s.native))
	mux.HandleFunc("POST /v3/pay/transactions/jsapi", s.auth("jsapi", s.jsapi))
	mux.HandleFunc("GET /v3/pay/transactions/out-trade-no/{no}", s.auth("query", s.query))
	mux.HandleFunc("POST /v3/pay/transactions/out-trade-no/{no}/close", s.auth("close", s.closeOrder))
	mux.HandleFunc("POST /v3/refund/domestic/refunds", s.auth("refund", s.refund))
	mux.HandleFunc("GET /v3/refund/domestic/refunds/{no}", s.auth("refund-query", s.refundQuery))
	mux.HandleFunc("POST "+PayPath, s.payHandler)
	mux.HandleFunc("POST "+RefundHoldPath, s.serveRefundHold)
	mux.HandleFunc("POST "+RefundSettlePath, s.serveRefundSettle)
	s.init()
	s.srv = httptest.NewUnstartedServer(mux)
	if l != nil {
		_ = s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	s.URL = s.srv.URL
	return s
}

// Close stops the server and the deliveries of its notifications.
func (s *Server) Close() {
	s.stop()
	s.srv.Close()
}

// Config returns an adapter configuration for this imitation: its ids, the test keys,
// both its platform certificate and its public key, its URL and clock; the caller may set
// NotifyURL and the rest.
func (s *Server) Config() wechatpay.Config {
	serial, key, err := wechatpay.PlatformCertificate(platformCertPEM)
	if err != nil {
		panic(err)
	}
	return wechatpay.Config{
		MchID: MchID, AppID: AppID, MerchantKey: MerchantKey(), MerchantSerial: MerchantSerial, APIv3Key: APIv3Key,
		PlatformKeys: map[string]*rsa.PublicKey{serial: key, PublicKeyID: &s.pubKey.PublicKey},
		BaseURL:      s.URL, HTTPClient: s.srv.Client(), Now: func() time.Time { return s.Now() },
	}
}

// Order returns a copy of a payment's order and whether it exists.
func (s *Server) Order(paymentID string) (Order, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.orders[channel.OutTradeNo(paymentID)]
	if !ok {
		return Order{}, false
	}
	c := *o
	c.Refunds = maps.Clone(o.Refunds)
	return c, true
}

// Calls returns the authenticated API calls received so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// FailNext makes the next n calls of kind call ("native", "jsapi", "query", "close",
// "refund", "refund-query")
// answer 500 SYSTEM_ERROR, signed.
func (s *Server) FailNext(call string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unavailable[call] = n
}

// Pay plays the buyer paying a payment's order: NOTPAY → SUCCESS with a new
// transaction_id; payerTotal is what the buyer paid (less than the total after a discount
// WeChat Pay funded; 0 means the total). A payment never ordered is created paid for
// payerTotal in CNY. Errors: the order is not NOTPAY.
func (s *Server) Pay(paymentID string, payerTotal int64) (Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	no := channel.OutTradeNo(paymentID)
	o, ok := s.orders[no]
	if !ok {
		o = &Order{OutTradeNo: no, State: "NOTPAY", Total: payerTotal, Currency: "CNY", Refunds: map[string]Refund{}}
		s.orders[no] = o
	}
	if o.State != "NOTPAY" {
		return Order{}, fmt.Errorf("wechatpaytest: order %s is %s, not NOTPAY", no, o.State)
	}
	s.payLocked(o, payerTotal)
	return *o, nil
}

// payLocked moves order o (NOTPAY) to SUCCESS and, when the imitation notifies, sends its
// TRANSACTION.SUCCESS; s.mu is held.
func (s *Server) payLocked(o *Order, payerTotal int64) {
	if payerTotal == 0 {
		payerTotal = o.Total
	}
	s.seq++
	o.State, o.TransactionID, o.PayerTotal, o.SuccessTime = "SUCCESS", fmt.Sprintf("42000012%012d", s.seq), payerTotal, s.Now()
	if s.notifying() && o.NotifyURL != "" {
		res := s.transactionJSON(o)
		s.sendLater(o.NotifyURL, wechatpay.EventTransactionSuccess, "transaction", res, o.OutTradeNo, "")
	}
}

// PayLate plays money that arrives although the order was closed (the buyer paid in the
// instant of the close, or a simulation plays a late payment): like Pay, from NOTPAY,
// CLOSED or PAYERROR. Errors: the order is paid already.
func (s *Server) PayLate(paymentID string, payerTotal int64) (Order, error) {
	s.mu.Lock()
	if o, ok := s.orders[channel.OutTradeNo(paymentID)]; ok && (o.State == "CLOSED" || o.State == "PAYERROR") {
		o.State = "NOTPAY"
	}
	s.mu.Unlock()
	return s.Pay(paymentID, payerTotal)
}

// auth checks a request's Authorization (WECHATPAY2-SHA256-RSA2048, the merchant's id and
// certificate serial, a 5-minute window, the signature over
// "METHOD\nURL\ntimestamp\nnonce\nbody\n" with the merchant key) before calling next with
// the body; failures answer 401 SIGN_ERROR. Answers are signed by reply.
func (s *Server) auth(call string, next func(w http.ResponseWriter, r *http.Request, body []byte) (int, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			s.reply(w, 400, apiErr("PARAM_ERROR", err.Error()))
			return
		}
		if msg := s.checkAuth(r, body); msg != "" {
			s.reply(w, 401, apiErr("SIGN_ERROR", msg))
			return
		}
		s.mu.Lock()
		if s.unavailable[call] > 0 {
			s.unavailable[call]--
			s.mu.Unlock()
			s.reply(w, 500, apiErr("SYSTEM_ERROR", "系统错误"))
			return
		}
		s.mu.Unlock()
		status, out := next(w, r, body)
		s.reply(w, status, out)
	}
}

func (s *Server) checkAuth(r *http.Request, body []byte) string {
	scheme, params, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || scheme != "WECHATPAY2-SHA256-RSA2048" {
		return "Authorization scheme is not WECHATPAY2-SHA256-RSA2048"
	}
	f := map[string]string{}
	for _, kv := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = strings.Trim(v, `"`)
	}
	if f["mchid"] != MchID || f["serial_no"] != MerchantSerial {
		return "mchid or serial_no is not the merchant's"
	}
	ts, err := strconv.ParseInt(f["timestamp"], 10, 64)
	if err != nil || s.Now().Unix()-ts >= 300 || ts-s.Now().Unix() >= 300 {
		return "timestamp outside the window"
	}
	sig, err := base64.StdEncoding.DecodeString(f["signature"])
	if err != nil {
		return "signature is not base64"
	}
	text := r.Method + "\n" + r.URL.RequestURI() + "\n" + f["timestamp"] + "\n" + f["nonce_str"] + "\n" + string(body) + "\n"
	h := sha256.Sum256([]byte(text))
	if rsa.VerifyPKCS1v15(s.merchant, crypto.SHA256, h[:], sig) != nil {
		return "signature does not verify"
	}
	return ""
}

func apiErr(code, msg string) map[string]string {
	return map[string]string{"code": code, "message": msg}
}

// reply writes a signed answer (no body for 204).
func (s *Server) reply(w http.ResponseWriter, status int, out any) {
	var body []byte
	if status != http.StatusNoContent && out != nil {
		body, _ = json.Marshal(out)
	}
	for k, v := range s.Sign(body, s.Now()) {
		w.Header()[k] = v
	}
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) record(c Call) { s.calls = append(s.calls, c) }

func (s *Server) native(_ http.ResponseWriter, _ *http.Request, body []byte) (int, any) {
	var in struct {
		AppID, MchID, Description string
		OutTradeNo                string `json:"out_trade_no"`
		NotifyURL                 string `json:"notify_url"`
		Amount                    struct {
			Total    int64
			Currency string
		}
	}
	if err := json.Unmarshal(body, &in); err != nil || in.AppID != AppID || in.MchID != MchID || in.OutTradeNo == "" ||
		len(in.OutTradeNo) > 32 || in.NotifyURL == "" || in.Amount.Total <= 0 {
		return 400, apiErr("PARAM_ERROR", "参数错误")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(Call{Method: "native", OutTradeNo: in.OutTradeNo})
	o, ok := s.orders[in.OutTradeNo]
	if !ok {
		s.seq++
		o = &Order{OutTradeNo: in.OutTradeNo, TradeType: "NATIVE", State: "NOTPAY", Total: in.Amount.Total, Currency: cmpOr(in.Amount.Currency, "CNY"),
			NotifyURL: in.NotifyURL, CodeURL: fmt.Sprintf("weixin://wxpay/bizpayurl?pr=test%06d", s.seq), Refunds: map[string]Refund{}}
		s.orders[o.OutTradeNo] = o
	}
	if o.TradeType != "NATIVE" {
		return 400, apiErr("OUT_TRADE_NO_USED", "商户订单号重复")
	}
	if status, refusal := refuseEnded(o); refusal != nil {
		return status, refusal
	}
	return 200, map[string]string{"code_url": o.CodeURL}
}

// refuseEnded is WeChat Pay's answer to an order asked again once it was paid or closed:
// 400 ORDERPAID or ORDER_CLOSED; nil while it can still be paid.
func refuseEnded(o *Order) (int, any) {
	switch o.State {
	case "SUCCESS", "REFUND":
		return 400, apiErr(wechatpay.CodeOrderPaid, "该订单已支付")
	case "CLOSED":
		return 400, apiErr(wechatpay.CodeOrderClosed, "订单已关闭")
	}
	return 0, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// transactionJSON is an order as the query and TRANSACTION notifications show it; s.mu
// is held.
func (s *Server) transactionJSON(o *Order) map[string]any {
	t := map[string]any{
		"appid": AppID, "mchid": MchID, "out_trade_no": o.OutTradeNo, "trade_state": o.State,
		"trade_type": cmpOr(o.TradeType, "NATIVE"), "trade_state_desc": o.State,
		"amount": map[string]any{"total": o.Total, "currency": o.Currency},
	}
	if o.TransactionID != "" {
		t["transaction_id"] = o.TransactionID
		t["success_time"] = o.SuccessTime.Format(time.RFC3339)
		t["amount"] = map[string]any{"total": o.Total, "payer_total": o.PayerTotal, "currency": o.Currency, "payer_currency": o.Currency}
		t["payer"] = map[string]string{"openid": cmpOr(o.OpenID, "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o")}
		t["bank_type"] = "OTHERS"
	}
	return t
}

func (s *Server) query(_ http.ResponseWriter, r *http.Request, _ []byte) (int, any) {
	if r.URL.Query().Get("mchid") != MchID {
		return 400, apiErr("PARAM_ERROR", "mchid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(Call{Method: "query", OutTradeNo: r.PathValue("no")})
	o, ok := s.orders[r.PathValue("no")]
	if !ok {
		return 404, apiErr(wechatpay.CodeOrderNotExist, "订单不存在")
	}
	return 200, s.transactionJSON(o)
}

func (s *Server) closeOrder(_ http.ResponseWriter, r *http.Request, body []byte) (int, any) {
	var in struct{ MchID string }
	if err := json.Unmarshal(body, &in); err != nil || in.MchID != MchID {
		return 400, apiErr("PARAM_ERROR", "mchid")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(Call{Method: "close", OutTradeNo: r.PathValue("no")})
	o, ok := s.orders[r.PathValue("no")]
	switch {
	case !ok:
		return 404, apiErr(wechatpay.CodeOrderNotExist, "订单不存在")
	case o.State == "SUCCESS" || o.State == "REFUND":
		return 400, apiErr(wechatpay.CodeOrderPaid, "该订单已支付")
	}
	o.State = "CLOSED"
	return 204, nil
}

func (s *Server) refund(_ http.ResponseWriter, _ *http.Request, body []byte) (int, any) {
	var in struct {
		OutTradeNo  string `json:"out_trade_no"`
		OutRefundNo string `json:"out_refund_no"`
		NotifyURL   string `json:"notify_url"`
		Amount      struct {
			Refund, Total int64
			Currency      string
		}
	}
	if err := json.Unmarshal(body, &in); err != nil || in.OutTradeNo == "" || in.OutRefundNo == "" || in.Amount.Refund <= 0 {
		return 400, apiErr("PARAM_ERROR", "参数错误")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Method: "refund", OutTradeNo: in.OutTradeNo}
	defer func() { s.record(call) }()
	o, ok := s.orders[in.OutTradeNo]
	if !ok {
		return 404, apiErr(wechatpay.CodeResourceNotExists, "订单不存在")
	}
	if prev, ok := o.Refunds[in.OutRefundNo]; ok {
		call.Replay = true
		if prev.Amount != in.Amount.Refund {
			return 400, apiErr("INVALID_REQUEST", "同一退款单号退款金额不一致")
		}
		return 200, s.refundJSON(o, prev)
	}
	switch {
	case o.State != "SUCCESS" && o.State != "REFUND":
		return 400, apiErr("INVALID_REQUEST", "订单未支付")
	case in.Amount.Total != o.Total || in.Amount.Currency != o.Currency:
		return 400, apiErr("PARAM_ERROR", "订单金额或币种与下单时不一致")
	case o.Refunded+in.Amount.Refund > o.Total:
		return 400, apiErr("NOT_ENOUGH", "退款金额超过可退金额")
	}
	s.seq++
	r := Refund{OutRefundNo: in.OutRefundNo, RefundID: fmt.Sprintf("50000000%012d", s.seq), Amount: in.Amount.Refund, At: s.Now(),
		Status: wechatpay.RefundProcessing, NotifyURL: in.NotifyURL}
	o.Refunds[in.OutRefundNo] = r
	o.Refunded += r.Amount
	o.State = "REFUND"
	answer := s.refundJSON(o, r)
	if !s.holdRefunds {
		// A refund to the buyer's balance (零钱) ends within minutes; the imitation ends it
		// at once, after answering PROCESSING as WeChat Pay does.
		s.settleLocked(o, r, wechatpay.RefundSuccess)
	}
	return 200, answer
}

// refundJSON is a refund as its create answer, its query and REFUND notifications show it
// (less the notification's refund_status naming); s.mu is held.
func (s *Server) refundJSON(o *Order, r Refund) map[string]any {
	j := map[string]any{"refund_id": r.RefundID, "out_refund_no": r.OutRefundNo, "transaction_id": o.TransactionID,
		"out_trade_no": o.OutTradeNo, "channel": "ORIGINAL", "user_received_account": "支付用户零钱", "status": r.Status,
		"create_time": r.At.In(beijing).Format(time.RFC3339),
		"amount": map[string]any{"refund": r.Amount, "total": o.Total, "payer_total": o.PayerTotal, "payer_refund": r.Amount,
			"settlement_refund": r.Amount, "settlement_total": o.Total, "discount_refund": 0, "currency": o.Currency}}
	if r.Status == wechatpay.RefundSuccess {
		j["success_time"] = r.At.In(beijing).Format(time.RFC3339)
	}
	return j
}

// refundQuery answers GET /v3/refund/domestic/refunds/{out_refund_no} (查询单笔退款).
func (s *Server) refundQuery(_ http.ResponseWriter, r *http.Request, _ []byte) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	no := r.PathValue("no")
	o, f, ok := s.findRefund(no)
	s.record(Call{Method: "refund-query", OutTradeNo: o.OutTradeNo})
	if !ok {
		return 404, apiErr(wechatpay.CodeResourceNotExists, "退款单不存在")
	}
	return 200, s.refundJSON(o, f)
}

// findRefund finds a refund by out_refund_no (unique per merchant); s.mu is held. The
// order is a zero Order when not found.
func (s *Server) findRefund(outRefundNo string) (*Order, Refund, bool) {
	for _, o := range s.orders {
		if f, ok := o.Refunds[outRefundNo]; ok {
			return o, f, true
		}
	}
	return &Order{}, Refund{}, false
}
