package alipay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// Response codes of the OpenAPI gateway (公共错误码).
const (
	codeSuccess     = "10000" // the call succeeded
	codeUnavailable = "20000" // service unavailable: retry
	codeBusiness    = "40004" // business failure: sub_code says which
)

// Business failure codes (sub_code) the adapter acts on.
const (
	SubTradeNotExist    = "ACQ.TRADE_NOT_EXIST"    // no trade with this out_trade_no (not scanned or never created)
	SubTradeStatusError = "ACQ.TRADE_STATUS_ERROR" // the trade's state forbids the call (close of a paid trade)
	SubTradeHasSuccess  = "ACQ.TRADE_HAS_SUCCESS"  // precreate of a trade already paid
	SubSystemError      = "ACQ.SYSTEM_ERROR"       // Alipay's own failure: retry
)

// APIError is an answer of the OpenAPI gateway other than success: Code, Msg and, for a
// business failure (code 40004), SubCode and SubMsg.
type APIError struct {
	Method  string
	Code    string
	Msg     string
	SubCode string
	SubMsg  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("alipay %s: %s %s (%s %s)", e.Method, e.Code, e.Msg, e.SubCode, e.SubMsg)
}

// response is the common part of every response.
type response struct {
	Code    string `json:"code"`
	Msg     string `json:"msg"`
	SubCode string `json:"sub_code"`
	SubMsg  string `json:"sub_msg"`
}

// call makes one OpenAPI call: the common parameters (app_id, method, format, charset,
// sign_type RSA2, timestamp in Beijing time, version 1.0, biz_content), signed with the app
// private key over every parameter but sign, posted as a form. The response is verified
// with the Alipay public key over the raw text of "<method with _>_response" as it appears
// in the body (Alipay signs that substring), then decoded into out. Errors: *APIError for
// an answer other than 10000; any other error (transport, bad status, bad signature,
// malformed JSON) is transient.
func (a *Adapter) call(ctx context.Context, method string, biz, out any, extra map[string]string) error {
	form, err := a.signed(method, biz, extra)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.BaseURL, strings.NewReader(form.Encode()))
	if err != nil {
		return fmt.Errorf("alipay %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded;charset=utf-8")
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("alipay %s: %w", method, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("alipay %s: read response: %w", method, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("alipay %s: HTTP status %d", method, resp.StatusCode)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return fmt.Errorf("alipay %s: response is not JSON: %w", method, err)
	}
	key := strings.ReplaceAll(method, ".", "_") + "_response"
	raw, ok := top[key]
	if !ok {
		key, raw, ok = "error_response", top["error_response"], top["error_response"] != nil
	}
	if !ok {
		return fmt.Errorf("alipay %s: response has no %s", method, strings.ReplaceAll(method, ".", "_")+"_response")
	}
	var signature string
	if s, ok := top["sign"]; ok {
		if err := json.Unmarshal(s, &signature); err != nil {
			return fmt.Errorf("alipay %s: response sign: %w", method, err)
		}
	}
	var common response
	if err := json.Unmarshal(raw, &common); err != nil {
		return fmt.Errorf("alipay %s: %s: %w", method, key, err)
	}
	if signature == "" {
		// Alipay leaves some gateway errors (a wrong app_id: no key to sign with)
		// unsigned; nothing unsigned is ever taken as a success.
		if common.Code == codeSuccess {
			return fmt.Errorf("alipay %s: successful response without sign", method)
		}
		return fmt.Errorf("alipay %s: unsigned error response %s %s", method, common.Code, common.Msg)
	}
	if !verify(a.cfg.AlipayPublicKey, bytes.TrimSpace(raw), signature) {
		return fmt.Errorf("alipay %s: response signature does not verify with the Alipay public key", method)
	}
	if common.Code != codeSuccess {
		return &APIError{Method: method, Code: common.Code, Msg: common.Msg, SubCode: common.SubCode, SubMsg: common.SubMsg}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("alipay %s: %s: %w", method, key, err)
		}
	}
	return nil
}

// signed returns the parameters of a call of method, with the common ones (app_id, method,
// format, charset, sign_type RSA2, timestamp in Beijing time, version 1.0, biz_content as
// JSON) and sign, the app private key's signature over every parameter but sign.
func (a *Adapter) signed(method string, biz any, extra map[string]string) (url.Values, error) {
	bizJSON, err := json.Marshal(biz)
	if err != nil {
		return nil, fmt.Errorf("alipay %s: %w", method, err)
	}
	params := map[string]string{
		"app_id":      a.cfg.AppID,
		"method":      method,
		"format":      "JSON",
		"charset":     "utf-8",
		"sign_type":   "RSA2",
		"timestamp":   a.cfg.Now().In(beijing).Format(timeLayout),
		"version":     "1.0",
		"biz_content": string(bizJSON),
	}
	for k, v := range extra {
		params[k] = v
	}
	sig, err := sign(a.cfg.PrivateKey, SignContent(params, "sign"))
	if err != nil {
		return nil, fmt.Errorf("alipay %s: sign: %w", method, err)
	}
	form := url.Values{"sign": {sig}}
	for k, v := range params {
		form.Set(k, v)
	}
	return form, nil
}

// subCode returns the sub_code of a business failure, "" for any other error.
func subCode(err error) string {
	var e *APIError
	if errors.As(err, &e) && e.Code == codeBusiness {
		return e.SubCode
	}
	return ""
}

// refused turns a business failure into the *orderly.Error that tells the caller not to
// retry; other errors (unavailable, ACQ.SYSTEM_ERROR, transport) are returned as they are.
func refused(err error) error {
	if sc := subCode(err); sc != "" && sc != SubSystemError {
		return orderly.Errorf(orderly.EINVALID, "%s", err.Error())
	}
	return err
}

// outTradeNo is the out_trade_no of payment p: the stored ProviderRef, or, for an attempt
// whose create was never answered, the one derived from its id (Alipay keys the trade by
// it, so the trade is found either way).
func outTradeNo(p *orderly.Payment) string {
	return cmp.Or(p.ProviderRef, channel.OutTradeNo(p.ID))
}

// ValidateAttempt implements orderly.AttemptValidator: a payment in another currency than
// Config.Currency is refused (EINVALID) before the attempt is written.
func (a *Adapter) ValidateAttempt(p *orderly.Payment) error {
	if p.Currency != a.cfg.Currency {
		return orderly.Errorf(orderly.EINVALID, "alipay: payment in %s, channel takes %s", p.Currency, a.cfg.Currency)
	}
	return nil
}

// tradeBiz is the biz_content common to the creating calls: out_trade_no, total_amount
// in yuan and subject. Errors: *orderly.Error EINVALID for another currency than
// Config.Currency.
func (a *Adapter) tradeBiz(p *orderly.Payment) (map[string]string, error) {
	if p.Currency != a.cfg.Currency {
		return nil, orderly.Errorf(orderly.EINVALID, "alipay: payment in %s, channel takes %s", p.Currency, a.cfg.Currency)
	}
	amount, err := channel.FormatDecimal(p.Amount, p.Currency)
	if err != nil {
		return nil, err
	}
	return map[string]string{
		"out_trade_no": channel.OutTradeNo(p.ID),
		"total_amount": amount,
		"subject":      "orderly order " + p.OrderID,
	}, nil
}

// Precreate creates the trade of a payment with alipay.trade.precreate (当面付, a QR code
// for the buyer to scan) and returns the QR code's content (https://qr.alipay.com/…).
// out_trade_no is channel.OutTradeNo(p.ID), total_amount p.Amount in yuan, subject
// "orderly order <order id>", notify_url Config.NotifyURL. Alipay answers the same
// out_trade_no with the same QR code, so a retry creates nothing twice; a trade already
// paid answers ACQ.TRADE_HAS_SUCCESS, returned as ("", nil). Errors: *orderly.Error
// EINVALID for another currency than Config.Currency or a business refusal; others are
// transient.
func (a *Adapter) Precreate(ctx context.Context, p *orderly.Payment) (qrCode string, err error) {
	biz, err := a.tradeBiz(p)
	if err != nil {
		return "", err
	}
	var extra map[string]string
	if a.cfg.NotifyURL != "" {
		extra = map[string]string{"notify_url": a.cfg.NotifyURL}
	}
	var out struct {
		QRCode string `json:"qr_code"`
	}
	err = a.call(ctx, "alipay.trade.precreate", biz, &out, extra)
	if subCode(err) == SubTradeHasSuccess {
		return "", nil
	}
	if err != nil {
		return "", refused(err)
	}
	return out.QRCode, nil
}

// PayURL returns the signed GET URL of alipay.trade.page.pay (wap false: product_code
// FAST_INSTANT_TRADE_PAY, the desktop cashier) or alipay.trade.wap.pay (wap true:
// QUICK_WAP_WAY, the mobile one) for payment p: Config.BaseURL with every parameter and
// sign in the query, notify_url Config.NotifyURL and return_url Config.ReturnURL. No call
// is made: Alipay creates the trade when the buyer's browser opens the URL, so until then
// alipay.trade.query answers ACQ.TRADE_NOT_EXIST. The URL carries the app's signature, not
// its key; it is meant for the buyer's browser. Errors: *orderly.Error EINVALID for another
// currency than Config.Currency.
func (a *Adapter) PayURL(p *orderly.Payment, wap bool) (string, error) {
	biz, err := a.tradeBiz(p)
	if err != nil {
		return "", err
	}
	method := "alipay.trade.page.pay"
	biz["product_code"] = "FAST_INSTANT_TRADE_PAY"
	if wap {
		method, biz["product_code"] = "alipay.trade.wap.pay", "QUICK_WAP_WAY"
	}
	extra := map[string]string{}
	if a.cfg.NotifyURL != "" {
		extra["notify_url"] = a.cfg.NotifyURL
	}
	if a.cfg.ReturnURL != "" {
		extra["return_url"] = a.cfg.ReturnURL
	}
	form, err := a.signed(method, biz, extra)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(a.cfg.BaseURL)
	if err != nil {
		return "", fmt.Errorf("alipay %s: BaseURL: %w", method, err)
	}
	u.RawQuery = form.Encode()
	return u.String(), nil
}

// Create implements orderly.Gateway: the trade the buyer pays, named by its out_trade_no
// (ProviderRef; Alipay's trade_no exists only once paid). PayMode qr: alipay.trade.precreate
// → NextAction display_qr_code with the qr_code (nil NextAction when the trade is paid
// already: there is nothing left for the buyer to do). PayMode page or wap: the signed
// page or wap pay URL → NextAction redirect_to_url. Errors: those of Precreate and PayURL.
func (a *Adapter) Create(ctx context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	ref := channel.OutTradeNo(p.ID)
	if a.cfg.PayMode == PayModePage || a.cfg.PayMode == PayModeWAP {
		u, err := a.PayURL(p, a.cfg.PayMode == PayModeWAP)
		if err != nil {
			return nil, err
		}
		return &orderly.GatewayAttempt{ProviderRef: ref, NextAction: &orderly.NextAction{Type: orderly.NextActionRedirectToURL, URL: u}}, nil
	}
	qr, err := a.Precreate(ctx, p)
	if err != nil {
		return nil, err
	}
	attempt := &orderly.GatewayAttempt{ProviderRef: ref}
	if qr != "" {
		attempt.NextAction = &orderly.NextAction{Type: orderly.NextActionDisplayQRCode, QRCode: qr}
	}
	return attempt, nil
}

// Query implements orderly.Gateway with alipay.trade.query by out_trade_no (outTradeNo):
// WAIT_BUYER_PAY and ACQ.TRADE_NOT_EXIST (a precreated code not scanned yet, a page pay URL
// not opened yet) → GatewayPending; TRADE_SUCCESS and TRADE_FINISHED → GatewaySucceeded
// with trade_no and total_amount in minor units; TRADE_CLOSED → GatewayFailed: closed
// unpaid, or paid and fully refunded, which holds no money either way (a refunded trade
// is never taken for a payment to fulfil). Errors are transient.
func (a *Adapter) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	var out struct {
		TradeNo     string `json:"trade_no"`
		TradeStatus string `json:"trade_status"`
		TotalAmount string `json:"total_amount"`
	}
	err := a.call(ctx, "alipay.trade.query", map[string]string{"out_trade_no": outTradeNo(p)}, &out, nil)
	if subCode(err) == SubTradeNotExist {
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	}
	if err != nil {
		return nil, err
	}
	switch out.TradeStatus {
	case TradeWaitBuyerPay:
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	case TradeSuccess, TradeFinished:
		amount, err := channel.ParseDecimal(out.TotalAmount, a.cfg.Currency)
		if err != nil {
			return nil, fmt.Errorf("alipay.trade.query: total_amount: %w", err)
		}
		return &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: out.TradeNo, Amount: amount}, nil
	case TradeClosed:
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	default:
		return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}, nil
	}
}

// Cancel implements orderly.Gateway with alipay.trade.close by out_trade_no: closed →
// GatewayFailed. A trade already paid answers ACQ.TRADE_STATUS_ERROR; then Query tells
// what it is (GatewaySucceeded with trade_no and amount: the payment is applied instead of
// closing). ACQ.TRADE_NOT_EXIST (a precreated QR code nobody scanned, a pay URL nobody
// opened) → GatewayFailed: there is no trade to close; the code itself stays scannable
// until it expires at Alipay (2 h by default), and money taken after the order closed is
// refunded (I2). Errors are transient.
func (a *Adapter) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	err := a.call(ctx, "alipay.trade.close", map[string]string{"out_trade_no": outTradeNo(p)}, nil, nil)
	switch subCode(err) {
	case "":
	case SubTradeNotExist:
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	case SubTradeStatusError:
		return a.Query(ctx, p)
	}
	if err != nil {
		return nil, err
	}
	return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
}

// refundTradeNo is the out_trade_no a refund names: its payment's stored ProviderRef, or
// the one derived from r.PaymentID.
func refundTradeNo(r *orderly.GatewayRefund) string {
	if r.Payment != nil && r.Payment.ProviderRef != "" && r.Payment.ID == r.PaymentID {
		return r.Payment.ProviderRef
	}
	return channel.OutTradeNo(r.PaymentID)
}

// Refund implements orderly.Gateway with alipay.trade.refund: out_trade_no of the payment
// (refundTradeNo), refund_amount r.Amount in yuan (r.Currency empty means
// Config.Currency), out_request_no r.IdempotencyKey (at most 64 characters). Code 10000
// only says the call was taken; fund_change says whether this call moved money:
//   - "Y" → GatewaySucceeded.
//   - "N" or absent → GatewayPending, Detail "fund_change=N": not confirmed. Alipay
//     answers N for a repeat of an out_request_no refunded before (no money moves twice)
//     and for a refund it has not carried out yet; QueryRefund tells which.
//
// Errors: *orderly.Error EINVALID for another currency than Config.Currency or a business
// refusal (amount beyond what is refundable, trade not refundable, seller balance too low:
// retrying the same refund will not help); ACQ.SYSTEM_ERROR and transport errors are
// transient.
func (a *Adapter) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	currency := cmp.Or(r.Currency, a.cfg.Currency) // the engine's refunds may leave it to the channel
	if currency != a.cfg.Currency {
		return nil, orderly.Errorf(orderly.EINVALID, "alipay: refund in %s, channel takes %s", r.Currency, a.cfg.Currency)
	}
	if len(r.IdempotencyKey) > 64 {
		return nil, orderly.Errorf(orderly.EINVALID, "alipay: out_request_no %q is longer than 64 characters", r.IdempotencyKey)
	}
	amount, err := channel.FormatDecimal(r.Amount, currency)
	if err != nil {
		return nil, err
	}
	biz := map[string]string{
		"out_trade_no":   refundTradeNo(r),
		"refund_amount":  amount,
		"out_request_no": r.IdempotencyKey,
	}
	var out struct {
		FundChange string `json:"fund_change"`
	}
	if err := a.call(ctx, "alipay.trade.refund", biz, &out, nil); err != nil {
		return nil, refused(err)
	}
	if out.FundChange == "Y" {
		return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
	}
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "fund_change=" + cmp.Or(out.FundChange, "absent")}, nil
}

// RefundSuccess is alipay.trade.fastpay.refund.query's refund_status of a refund done.
const RefundSuccess = "REFUND_SUCCESS"

// QueryRefund implements orderly.Gateway with alipay.trade.fastpay.refund.query by the
// payment's out_trade_no and out_request_no r.IdempotencyKey. Code 10000 only says the
// query worked:
//   - refund_status REFUND_SUCCESS → GatewaySucceeded.
//   - the refund named (out_request_no, refund_amount) without refund_status →
//     GatewayPending, Detail "refund_status absent": Alipay has the request and has not
//     finished it (its docs: a query soon after the refund may not see it done yet).
//   - no refund in the answer, or ACQ.TRADE_NOT_EXIST → *orderly.Error ENOTFOUND: not
//     received or failed; Alipay's docs say to call the refund again with the same
//     out_request_no, which refunds at most once and answers a refusal (a failure's
//     cause, such as ACQ.SELLER_BALANCE_NOT_ENOUGH) if it fails again.
//
// Other errors are transient.
func (a *Adapter) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	biz := map[string]any{
		"out_trade_no":   refundTradeNo(r),
		"out_request_no": r.IdempotencyKey,
	}
	var out struct {
		OutRequestNo string `json:"out_request_no"`
		RefundAmount string `json:"refund_amount"`
		RefundStatus string `json:"refund_status"`
	}
	err := a.call(ctx, "alipay.trade.fastpay.refund.query", biz, &out, nil)
	if subCode(err) == SubTradeNotExist {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "alipay: refund %s: no trade %s", r.IdempotencyKey, refundTradeNo(r))
	}
	if err != nil {
		return nil, err
	}
	switch {
	case out.RefundStatus == RefundSuccess:
		return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
	case out.OutRequestNo == "" && out.RefundAmount == "":
		return nil, orderly.Errorf(orderly.ENOTFOUND, "alipay: no refund %s on trade %s", r.IdempotencyKey, refundTradeNo(r))
	case out.RefundStatus == "":
		return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "refund_status absent"}, nil
	default:
		return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "refund_status=" + out.RefundStatus}, nil
	}
}
