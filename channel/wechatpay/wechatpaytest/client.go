package wechatpaytest

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/orderlyhq/orderly/channel/wechatpay"
)

// PayPath is the imitation's client step: what the buyer's WeChat app does when the buyer
// scans a Native code_url or the page calls getBrandWCPayRequest (wx.requestPayment in a
// mini program) with the JSAPI parameters, and confirms. It is not a WeChat Pay API (the
// real step happens inside the WeChat app); its body is JSON, one of:
//
//	{"code_url":"weixin://wxpay/bizpayurl?pr=…"}
//	{"appId":…,"timeStamp":…,"nonceStr":…,"package":"prepay_id=…","signType":"RSA","paySign":…,"openid":…}
//
// The second is the next_action.wechat_jsapi object as the shop handed it over, with
// "openid" the WeChat user who pays (default: the order's payer). As the WeChat client
// does, the imitation checks appId against the order's app, signType RSA, and paySign —
// SHA256withRSA over "appId\ntimeStamp\nnonceStr\npackage\n" — with the merchant's public
// key, and that the user is the order's payer.openid. The order then moves NOTPAY →
// SUCCESS and, when the imitation notifies (Notify), its TRANSACTION.SUCCESS goes to the
// order's notify_url. Answers: 200 {"trade_state":"SUCCESS","out_trade_no","transaction_id"};
// 400 PARAM_ERROR; 401 SIGN_ERROR (paySign does not verify); 403 OPENID_MISMATCH; 404
// ORDER_NOT_EXIST (no order with that code_url or prepay_id); 409 ORDERPAID or
// ORDER_CLOSED.
const PayPath = "/imitation/pay"

// payRequest is the body of PayPath.
type payRequest struct {
	CodeURL   string `json:"code_url"`
	AppID     string `json:"appId"`
	TimeStamp string `json:"timeStamp"`
	NonceStr  string `json:"nonceStr"`
	Package   string `json:"package"`
	SignType  string `json:"signType"`
	PaySign   string `json:"paySign"`
	OpenID    string `json:"openid"`
}

func (s *Server) payHandler(w http.ResponseWriter, r *http.Request) {
	var in payRequest
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err == nil {
		err = json.Unmarshal(b, &in)
	}
	status, out := s.payClient(&in, err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(out)
}

// payClient plays the client step of req (PayPath); decodeErr is the body's decoding error.
func (s *Server) payClient(req *payRequest, decodeErr error) (int, any) {
	if decodeErr != nil || (req.CodeURL == "") == (req.Package == "") {
		return 400, apiErr("PARAM_ERROR", "give code_url, or the JSAPI parameters (appId, timeStamp, nonceStr, package, signType, paySign)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var o *Order
	if req.CodeURL != "" {
		for _, c := range s.orders {
			if c.CodeURL == req.CodeURL {
				o = c
			}
		}
	} else {
		prepayID, ok := strings.CutPrefix(req.Package, "prepay_id=")
		for _, c := range s.orders {
			if ok && prepayID != "" && c.PrepayID == prepayID {
				o = c
			}
		}
		if o != nil {
			if status, out := s.checkJSAPI(o, req); status != 0 {
				return status, out
			}
		}
	}
	switch {
	case o == nil:
		return 404, apiErr(wechatpay.CodeOrderNotExist, "订单不存在")
	case o.State == "SUCCESS" || o.State == "REFUND":
		return 409, apiErr(wechatpay.CodeOrderPaid, "该订单已支付")
	case o.State != "NOTPAY":
		return 409, apiErr("ORDER_CLOSED", "订单已关闭")
	}
	s.payLocked(o, 0)
	return 200, map[string]string{"trade_state": o.State, "out_trade_no": o.OutTradeNo, "transaction_id": o.TransactionID}
}

// checkJSAPI checks the JSAPI parameters of order o as the WeChat client does; status 0
// means they pass. s.mu is held.
func (s *Server) checkJSAPI(o *Order, req *payRequest) (int, any) {
	if req.AppID != AppID || req.SignType != "RSA" || req.TimeStamp == "" || req.NonceStr == "" {
		return 400, apiErr("PARAM_ERROR", "appId, timeStamp, nonceStr and signType RSA are required, for the order's app")
	}
	sig, err := base64.StdEncoding.DecodeString(req.PaySign)
	if err != nil {
		return 401, apiErr("SIGN_ERROR", "paySign is not base64")
	}
	h := sha256.Sum256([]byte(req.AppID + "\n" + req.TimeStamp + "\n" + req.NonceStr + "\n" + req.Package + "\n"))
	if rsa.VerifyPKCS1v15(s.merchant, crypto.SHA256, h[:], sig) != nil {
		return 401, apiErr("SIGN_ERROR", "paySign does not verify with the merchant's key")
	}
	if req.OpenID != "" && req.OpenID != o.OpenID {
		return 403, apiErr("OPENID_MISMATCH", "the order is for another WeChat user")
	}
	return 0, nil
}

// jsapi answers POST /v3/pay/transactions/jsapi (JSAPI下单): the Native order's fields and
// payer.openid; the answer is {"prepay_id"}. The same out_trade_no answers the same
// prepay_id while the order is unpaid.
func (s *Server) jsapi(_ http.ResponseWriter, _ *http.Request, body []byte) (int, any) {
	var in struct {
		AppID, MchID, Description string
		OutTradeNo                string `json:"out_trade_no"`
		NotifyURL                 string `json:"notify_url"`
		Amount                    struct {
			Total    int64
			Currency string
		}
		Payer struct {
			OpenID string `json:"openid"`
		}
	}
	if err := json.Unmarshal(body, &in); err != nil || in.AppID != AppID || in.MchID != MchID || in.OutTradeNo == "" ||
		len(in.OutTradeNo) > 32 || in.NotifyURL == "" || in.Amount.Total <= 0 || in.Payer.OpenID == "" {
		return 400, apiErr("PARAM_ERROR", "参数错误")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(Call{Method: "jsapi", OutTradeNo: in.OutTradeNo})
	o, ok := s.orders[in.OutTradeNo]
	if !ok {
		s.seq++
		o = &Order{OutTradeNo: in.OutTradeNo, TradeType: "JSAPI", State: "NOTPAY", Total: in.Amount.Total,
			Currency: cmpOr(in.Amount.Currency, "CNY"), NotifyURL: in.NotifyURL, OpenID: in.Payer.OpenID,
			PrepayID: fmt.Sprintf("wx%s%012d", s.Now().In(beijing).Format("02150405"), s.seq), Refunds: map[string]Refund{}}
		s.orders[o.OutTradeNo] = o
	}
	if o.TradeType != "JSAPI" || o.OpenID != in.Payer.OpenID {
		return 400, apiErr("OUT_TRADE_NO_USED", "商户订单号重复")
	}
	if status, refusal := refuseEnded(o); refusal != nil {
		return status, refusal
	}
	return 200, map[string]string{"prepay_id": o.PrepayID}
}

// HoldRefunds decides what becomes of the refunds accepted from now on. With hold false
// (the default) a refund is answered PROCESSING and becomes SUCCESS at once after (a refund
// to the buyer's balance, which WeChat Pay ends within minutes); with hold true it stays
// PROCESSING until SettleRefund ends it, as a refund to a bank card does for days.
func (s *Server) HoldRefunds(hold bool) {
	s.mu.Lock()
	s.holdRefunds = hold
	s.mu.Unlock()
}

// SettleRefund moves the refund made with outRefundNo from PROCESSING (or ABNORMAL) to
// status: wechatpay.RefundSuccess, RefundClosed (no money moved: its amount is refundable
// again at the imitation) or RefundAbnormal (the buyer's account refused the money; the
// merchant settles it later, SUCCESS or CLOSED). The query answers the new status and, when
// the imitation notifies (Notify), REFUND.<status> goes to the refund's notify_url.
// Errors: no such refund, a refund already SUCCESS or CLOSED, or another status.
func (s *Server) SettleRefund(outRefundNo, status string) (Refund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, f, ok := s.findRefund(outRefundNo)
	switch {
	case !ok:
		return Refund{}, fmt.Errorf("wechatpaytest: no refund %s", outRefundNo)
	case f.Status == wechatpay.RefundSuccess || f.Status == wechatpay.RefundClosed:
		return Refund{}, fmt.Errorf("wechatpaytest: refund %s is %s already", outRefundNo, f.Status)
	case status != wechatpay.RefundSuccess && status != wechatpay.RefundClosed && status != wechatpay.RefundAbnormal:
		return Refund{}, fmt.Errorf("wechatpaytest: refund status %q", status)
	}
	return s.settleLocked(o, f, status), nil
}

// settleLocked sets refund f of order o to status and notifies it; s.mu is held.
func (s *Server) settleLocked(o *Order, f Refund, status string) Refund {
	f.Status = status
	o.Refunds[f.OutRefundNo] = f
	if status == wechatpay.RefundClosed {
		o.Refunded -= f.Amount
		if o.Refunded == 0 && o.State == "REFUND" {
			o.State = "SUCCESS"
		}
	}
	if s.notifying() && f.NotifyURL != "" {
		res := s.refundJSON(o, f)
		res["refund_status"], res["mchid"] = status, MchID
		delete(res, "status")
		s.sendLater(f.NotifyURL, "REFUND."+status, "refund", res, o.OutTradeNo, f.OutRefundNo)
	}
	return f
}

// RefundHoldPath and RefundSettlePath are the imitation's HTTP refund plays, for a server
// in another process (`orderly imitate wechat`); they are not WeChat Pay APIs.
// POST RefundHoldPath?on=true|false calls HoldRefunds: 204, or 400 for another value.
// POST RefundSettlePath?out_refund_no=…&status=SUCCESS|CLOSED|ABNORMAL calls SettleRefund
// (out_refund_no as the merchant sent it: wechatpay.OutRefundNo of orderly's refund id,
// which is that id itself): 200 and the refund as JSON (out_refund_no, refund_id, amount
// in minor units, status), 400 for another status, 404 when no such refund is open.
const (
	RefundHoldPath   = "/imitation/refunds/hold"
	RefundSettlePath = "/imitation/refunds/settle"
)

// serveRefundHold answers POST RefundHoldPath.
func (s *Server) serveRefundHold(w http.ResponseWriter, r *http.Request) {
	on, err := strconv.ParseBool(r.URL.Query().Get("on"))
	if err != nil {
		http.Error(w, "on=true or on=false", http.StatusBadRequest)
		return
	}
	s.HoldRefunds(on)
	w.WriteHeader(http.StatusNoContent)
}

// serveRefundSettle answers POST RefundSettlePath.
func (s *Server) serveRefundSettle(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := q.Get("status")
	if status != wechatpay.RefundSuccess && status != wechatpay.RefundClosed && status != wechatpay.RefundAbnormal {
		http.Error(w, "status=SUCCESS, CLOSED or ABNORMAL", http.StatusBadRequest)
		return
	}
	f, err := s.SettleRefund(q.Get("out_refund_no"), status)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"out_refund_no": f.OutRefundNo, "refund_id": f.RefundID, "amount": f.Amount, "status": f.Status})
}
