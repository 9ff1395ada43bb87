package wechatpay

import (
	"bytes"
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// APIError is an answer of the API v3 other than 2xx: its HTTP status and the body's code
// and message ("ORDERPAID", "ORDER_NOT_EXIST", "SYSTEM_ERROR", …).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("wechatpay: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// Error codes of the API v3 the adapter acts on.
const (
	CodeOrderPaid     = "ORDERPAID"       // close or create of an order already paid
	CodeOrderNotExist = "ORDER_NOT_EXIST" // no order with this out_trade_no
	CodeOrderClosed   = "ORDERCLOSED"     // create of an order closed already
	// CodeResourceNotExists answers a query of a refund (or a refund of an order) WeChat Pay
	// does not know.
	CodeResourceNotExists = "RESOURCE_NOT_EXISTS"
)

func apiCode(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// refused turns a 4xx answer (other than 429 and a signature or authentication failure
// of our own request, which may heal with a configuration change) into the *orderly.Error
// that tells the caller not to retry; 5xx and transport errors stay transient.
func refused(err error) error {
	var e *APIError
	if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests &&
		e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden {
		return orderly.Errorf(orderly.EINVALID, "%s", err.Error())
	}
	return err
}

// do makes one API v3 call: the request signed with the merchant key over
// "METHOD\nURL\ntimestamp\nnonce\nbody\n" (URL = path and query) in the Authorization
// header, the answer verified like a notification (Wechatpay-* headers, Window, the
// platform key of its serial) before anything in it is believed, then decoded into out.
// Errors: *APIError for a verified non-2xx answer; any other error (transport, unverified
// answer, malformed JSON) is transient.
func (a *Adapter) do(ctx context.Context, method, pathQuery string, in, out any) error {
	var body []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("wechatpay %s %s: %w", method, pathQuery, err)
		}
		body = b
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	nonceStr := hex.EncodeToString(nonce)
	ts := strconv.FormatInt(a.cfg.Now().Unix(), 10)
	digest := sha256.Sum256([]byte(method + "\n" + pathQuery + "\n" + ts + "\n" + nonceStr + "\n" + string(body) + "\n"))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.cfg.MerchantKey, crypto.SHA256, digest[:])
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: sign: %w", method, pathQuery, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.cfg.BaseURL+pathQuery, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: %w", method, pathQuery, err)
	}
	req.Header.Set("Authorization", fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%s",serial_no="%s"`,
		SignatureType, a.cfg.MchID, nonceStr, base64.StdEncoding.EncodeToString(sig), ts, a.cfg.MerchantSerial))
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: %w", method, pathQuery, err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("wechatpay %s %s: read answer: %w", method, pathQuery, err)
	}
	if err := a.verifySignature(resp.Header, respBody, a.cfg.Now()); err != nil {
		return fmt.Errorf("wechatpay %s %s: answer (HTTP %d) not believed: %s", method, pathQuery, resp.StatusCode, orderly.ErrorMessage(err))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &APIError{Status: resp.StatusCode}
		_ = json.Unmarshal(respBody, e)
		return e
	}
	if out != nil && len(respBody) > 0 {
		if err := json.Unmarshal(respBody, out); err != nil {
			return fmt.Errorf("wechatpay %s %s: answer is not JSON: %w", method, pathQuery, err)
		}
	}
	return nil
}

// UnmarshalJSON reads the body of an error answer ({"code":…,"message":…}).
func (e *APIError) UnmarshalJSON(b []byte) error {
	var v struct{ Code, Message string }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	e.Code, e.Message = v.Code, v.Message
	return nil
}

// ValidateAttempt implements orderly.AttemptValidator: a payment in another currency than
// Config.Currency is refused (EINVALID) before the attempt is written.
func (a *Adapter) ValidateAttempt(p *orderly.Payment) error {
	if p.Currency != a.cfg.Currency {
		return orderly.Errorf(orderly.EINVALID, "wechatpay: payment in %s, channel takes %s", p.Currency, a.cfg.Currency)
	}
	return nil
}

// NativeOrder creates a Native payment (a QR code the buyer scans) with POST
// /v3/pay/transactions/native and returns its code_url: appid Config.AppID, mchid,
// description "orderly order <order id>", out_trade_no channel.OutTradeNo(p.ID),
// notify_url Config.NotifyURL, amount {total: p.Amount, currency}. WeChat Pay answers the
// same out_trade_no with the same order, so a retry creates nothing twice; an order already
// paid answers ORDERPAID, returned as ("", nil). Errors: *orderly.Error EINVALID when AppID
// or NotifyURL is not configured, for another currency than Config.Currency, or a 4xx
// refusal; others are transient.
func (a *Adapter) NativeOrder(ctx context.Context, p *orderly.Payment) (codeURL string, err error) {
	switch {
	case a.cfg.AppID == "" || a.cfg.NotifyURL == "":
		return "", orderly.Errorf(orderly.EINVALID, "wechatpay: AppID and NotifyURL are required to create payments")
	case p.Currency != a.cfg.Currency:
		return "", orderly.Errorf(orderly.EINVALID, "wechatpay: payment in %s, channel takes %s", p.Currency, a.cfg.Currency)
	}
	in := map[string]any{
		"appid": a.cfg.AppID, "mchid": a.cfg.MchID, "description": "orderly order " + p.OrderID,
		"out_trade_no": channel.OutTradeNo(p.ID), "notify_url": a.cfg.NotifyURL,
		"amount": map[string]any{"total": p.Amount, "currency": p.Currency},
	}
	var out struct {
		CodeURL string `json:"code_url"`
	}
	err = a.do(ctx, http.MethodPost, "/v3/pay/transactions/native", in, &out)
	if apiCode(err) == CodeOrderPaid {
		return "", nil
	}
	if err != nil {
		return "", refused(err)
	}
	return out.CodeURL, nil
}

// JSAPIOrder creates a JSAPI (official account or mini-program) payment for the payer with
// openid p.PayerID with POST /v3/pay/transactions/jsapi and returns its prepay_id: the body
// of NativeOrder plus payer {openid}. An order already paid answers ORDERPAID, returned as
// ("", nil). Errors: as NativeOrder.
func (a *Adapter) JSAPIOrder(ctx context.Context, p *orderly.Payment) (prepayID string, err error) {
	switch {
	case a.cfg.AppID == "" || a.cfg.NotifyURL == "":
		return "", orderly.Errorf(orderly.EINVALID, "wechatpay: AppID and NotifyURL are required to create payments")
	case p.Currency != a.cfg.Currency:
		return "", orderly.Errorf(orderly.EINVALID, "wechatpay: payment in %s, channel takes %s", p.Currency, a.cfg.Currency)
	case p.PayerID == "":
		return "", orderly.Errorf(orderly.EINVALID, "wechatpay: a JSAPI payment needs the payer's openid")
	}
	in := map[string]any{
		"appid": a.cfg.AppID, "mchid": a.cfg.MchID, "description": "orderly order " + p.OrderID,
		"out_trade_no": channel.OutTradeNo(p.ID), "notify_url": a.cfg.NotifyURL,
		"amount": map[string]any{"total": p.Amount, "currency": p.Currency},
		"payer":  map[string]string{"openid": p.PayerID},
	}
	var out struct {
		PrepayID string `json:"prepay_id"`
	}
	err = a.do(ctx, http.MethodPost, "/v3/pay/transactions/jsapi", in, &out)
	if apiCode(err) == CodeOrderPaid {
		return "", nil
	}
	if err != nil {
		return "", refused(err)
	}
	if out.PrepayID == "" {
		return "", errors.New("wechatpay jsapi: answer without prepay_id")
	}
	return out.PrepayID, nil
}

// RequestPayment returns the parameters the buyer's page passes to WeixinJSBridge
// getBrandWCPayRequest (or a mini program to wx.requestPayment) for prepayID: appId
// Config.AppID, timeStamp the unix seconds of Config.Now, nonceStr 32 random hex digits,
// package "prepay_id=<prepayID>", signType "RSA" and paySign, the base64 SHA256withRSA
// signature with the merchant key of "appId\ntimeStamp\nnonceStr\npackage\n" (WeChat Pay
// "JSAPI调起支付", the wechatpay-go SDK's PrepayWithRequestPayment). Nothing secret is in
// it: the buyer's WeChat client checks paySign with the merchant's public key.
func (a *Adapter) RequestPayment(prepayID string) (*orderly.WeChatJSAPI, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	j := &orderly.WeChatJSAPI{AppID: a.cfg.AppID, TimeStamp: strconv.FormatInt(a.cfg.Now().Unix(), 10),
		NonceStr: hex.EncodeToString(nonce), Package: "prepay_id=" + prepayID, SignType: "RSA"}
	digest := sha256.Sum256([]byte(j.AppID + "\n" + j.TimeStamp + "\n" + j.NonceStr + "\n" + j.Package + "\n"))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.cfg.MerchantKey, crypto.SHA256, digest[:])
	if err != nil {
		return nil, fmt.Errorf("wechatpay: sign the JSAPI request: %w", err)
	}
	j.PaySign = base64.StdEncoding.EncodeToString(sig)
	return j, nil
}

// Create implements orderly.Gateway. Without p.PayerID it is a Native payment
// (NativeOrder): ProviderRef is the out_trade_no (a Native order has no other id) and the
// handoff display_qr_code with the code_url. With p.PayerID (an openid of Config.AppID) it
// is a JSAPI payment (JSAPIOrder): ProviderRef is the prepay_id and the handoff
// wechat_jsapi with RequestPayment's parameters. An order WeChat Pay reports paid already
// gets no handoff: its notification or the inspection applies it. Errors: those of
// NativeOrder and JSAPIOrder.
func (a *Adapter) Create(ctx context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	if p.PayerID == "" {
		codeURL, err := a.NativeOrder(ctx, p)
		if err != nil {
			return nil, err
		}
		att := &orderly.GatewayAttempt{ProviderRef: channel.OutTradeNo(p.ID)}
		if codeURL != "" {
			att.NextAction = &orderly.NextAction{Type: orderly.NextActionDisplayQRCode, QRCode: codeURL}
		}
		return att, nil
	}
	prepayID, err := a.JSAPIOrder(ctx, p)
	if err != nil || prepayID == "" {
		return &orderly.GatewayAttempt{}, err
	}
	j, err := a.RequestPayment(prepayID)
	if err != nil {
		return nil, err
	}
	return &orderly.GatewayAttempt{ProviderRef: prepayID,
		NextAction: &orderly.NextAction{Type: orderly.NextActionWeChatJSAPI, WeChatJSAPI: j}}, nil
}

// query reads an order by out_trade_no; nil, nil when WeChat Pay has none.
func (a *Adapter) query(ctx context.Context, paymentID string) (*transaction, error) {
	var t transaction
	path := "/v3/pay/transactions/out-trade-no/" + url.PathEscape(channel.OutTradeNo(paymentID)) + "?mchid=" + url.QueryEscape(a.cfg.MchID)
	err := a.do(ctx, http.MethodGet, path, nil, &t)
	if apiCode(err) == CodeOrderNotExist {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Query implements orderly.Gateway with GET /v3/pay/transactions/out-trade-no/{no}:
// SUCCESS, and REFUND (paid, then refunded), → GatewaySucceeded with transaction_id and
// amount.total; NOTPAY and USERPAYING → GatewayPending, as is an order WeChat Pay does not
// know (ORDER_NOT_EXIST); CLOSED, REVOKED and PAYERROR → GatewayFailed; anything else →
// GatewayUnknown. Errors are transient.
func (a *Adapter) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := p.ID
	t, err := a.query(ctx, paymentID)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	}
	switch t.TradeState {
	case "SUCCESS", "REFUND":
		if t.Amount.Total == nil {
			return nil, errors.New("wechatpay query: paid order without amount.total")
		}
		return &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: t.TransactionID, Amount: *t.Amount.Total}, nil
	case "NOTPAY", "USERPAYING":
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	case "CLOSED", "REVOKED", "PAYERROR":
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	default:
		return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}, nil
	}
}

// Cancel implements orderly.Gateway with POST /v3/pay/transactions/out-trade-no/{no}/close
// (关闭订单): closed (204) → GatewayFailed; an order WeChat Pay does not know → GatewayFailed
// (nobody can pay it); ORDERPAID → Query, which answers GatewaySucceeded with the payment
// (it is applied instead of closing). Errors are transient.
func (a *Adapter) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := p.ID
	path := "/v3/pay/transactions/out-trade-no/" + url.PathEscape(channel.OutTradeNo(paymentID)) + "/close"
	err := a.do(ctx, http.MethodPost, path, map[string]string{"mchid": a.cfg.MchID}, nil)
	switch apiCode(err) {
	case CodeOrderPaid:
		return a.Query(ctx, p)
	case CodeOrderNotExist, CodeOrderClosed:
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	}
	if err != nil {
		return nil, err
	}
	return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
}

// Refund implements orderly.Gateway (r.Currency empty means Config.Currency) with POST
// /v3/refund/domestic/refunds: out_trade_no of r.PaymentID, out_refund_no
// OutRefundNo(r.IdempotencyKey), amount {refund: r.Amount, total, currency}, notify_url
// Config.NotifyURL when set. The order's total, which the API requires, is read first with
// a query. WeChat Pay refunds once per out_refund_no: asked again it answers the same
// refund and moves no money. The answer's status maps as refundResult says; the final
// outcome arrives later as a REFUND.* notification or by QueryRefund. Errors:
// *orderly.Error EINVALID for another currency than Config.Currency, an order that is not
// paid, or a 4xx refusal (NOT_ENOUGH, amount beyond the rest, …); others are transient.
func (a *Adapter) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	currency := cmp.Or(r.Currency, a.cfg.Currency) // the engine's refunds may leave it to the channel
	if currency != a.cfg.Currency {
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay: refund in %s, channel takes %s", r.Currency, a.cfg.Currency)
	}
	t, err := a.query(ctx, r.PaymentID)
	if err != nil {
		return nil, err
	}
	if t == nil || t.Amount.Total == nil || (t.TradeState != "SUCCESS" && t.TradeState != "REFUND") {
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay: payment %s is not paid at WeChat Pay", r.PaymentID)
	}
	in := map[string]any{
		"out_trade_no":  channel.OutTradeNo(r.PaymentID),
		"out_refund_no": OutRefundNo(r.IdempotencyKey),
		"amount":        map[string]any{"refund": r.Amount, "total": *t.Amount.Total, "currency": currency},
	}
	if a.cfg.NotifyURL != "" {
		in["notify_url"] = a.cfg.NotifyURL
	}
	var out refundAnswer
	if err := a.do(ctx, http.MethodPost, "/v3/refund/domestic/refunds", in, &out); err != nil {
		return nil, refused(err)
	}
	return out.result(), nil
}

// QueryRefund implements orderly.Gateway with GET /v3/refund/domestic/refunds/{out_refund_no}
// (查询单笔退款), out_refund_no OutRefundNo(r.IdempotencyKey); the status maps as
// refundResult says. Errors: *orderly.Error ENOTFOUND when WeChat Pay has no refund under
// it (404 RESOURCE_NOT_EXISTS: the caller then asks for the refund); any other error is
// transient, never a refusal, since the refund may stand at WeChat Pay.
func (a *Adapter) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	no := OutRefundNo(r.IdempotencyKey)
	var out refundAnswer
	err := a.do(ctx, http.MethodGet, "/v3/refund/domestic/refunds/"+url.PathEscape(no), nil, &out)
	if apiCode(err) == CodeResourceNotExists {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "wechatpay: no refund %s", no)
	}
	if err != nil {
		return nil, err
	}
	return out.result(), nil
}

// refundAnswer is the answer of a refund and of its query (the fields orderly reads).
type refundAnswer struct {
	RefundID string `json:"refund_id"`
	Status   string `json:"status"`
}

// Refund statuses (status, refund_status) of the API v3.
const (
	RefundSuccess    = "SUCCESS"    // final: the money is back with the buyer
	RefundClosed     = "CLOSED"     // final: closed, no money moved
	RefundProcessing = "PROCESSING" // accepted, not final
	RefundAbnormal   = "ABNORMAL"   // not final: the buyer's account refused it; the merchant resolves it
)

// result maps a refund's status: SUCCESS → GatewaySucceeded; CLOSED → GatewayFailed;
// PROCESSING, ABNORMAL and any status unknown to the adapter → GatewayPending, never a
// success. ABNORMAL (the buyer's card cancelled or frozen) needs the merchant to act in the
// merchant platform or with the abnormal-refund API, after which it ends SUCCESS or CLOSED.
// Detail is the status as WeChat Pay names it, ProviderRef the refund_id.
func (r *refundAnswer) result() *orderly.GatewayRefundResult {
	res := &orderly.GatewayRefundResult{Status: orderly.GatewayPending, ProviderRef: r.RefundID, Detail: r.Status}
	switch r.Status {
	case RefundSuccess:
		res.Status = orderly.GatewaySucceeded
	case RefundClosed:
		res.Status = orderly.GatewayFailed
	}
	return res
}
