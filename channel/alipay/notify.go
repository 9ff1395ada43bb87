package alipay

import (
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// Trade statuses of Alipay (trade_status).
const (
	TradeWaitBuyerPay = "WAIT_BUYER_PAY" // created, not paid
	TradeSuccess      = "TRADE_SUCCESS"  // paid, refundable
	TradeFinished     = "TRADE_FINISHED" // paid, no longer refundable (can come months after TRADE_SUCCESS)
	TradeClosed       = "TRADE_CLOSED"   // closed unpaid, or fully refunded
)

// Verify implements channel.Adapter for Alipay's async notification (异步通知): a POST
// whose body is application/x-www-form-urlencoded. Only the body is read (the semantics of
// http.Request.PostForm: query parameters of the notify URL are never taken); header is
// not used. The signature is checked over the decoded parameters without sign and
// sign_type, sorted in ASCII order, empty values skipped (SignContent), with
// SHA256withRSA and the Alipay public key. sign_type is not covered by the signature, so
// it is not trusted: RSA2 is the only algorithm, and a notification declaring another (or
// none: Alipay always sends it) is refused. Alipay notifications carry no timestamp: now is not used, and a replayed
// notification is left to the dedupe on notify_id.
//
// Errors (*orderly.Error): EUNAUTHORIZED for a body that is not a form, a parameter given
// twice, a missing, malformed or wrong signature, or a sign_type other than RSA2; EINVALID
// for an authentic notification of another app_id or seller_id, without notify_id or
// out_trade_no, a payment without trade_no, with an amount that is not exact decimal yuan (more than two decimals is
// refused, not rounded), an unknown trade_status or an unreadable time.
//
// Mapping (Kind, Amount in minor units of Config.Currency):
//   - TRADE_SUCCESS or TRADE_FINISHED: PaymentSucceeded, Amount = total_amount,
//     ChannelTxnID = trade_no, OccurredAt = gmt_payment. TRADE_FINISHED names the same
//     out_trade_no and trade_no as the TRADE_SUCCESS before it, so the payment service sees
//     a duplicate of a payment already applied (or refunded) and neither fulfils nor
//     refunds again. TRADE_FINISHED is never read as a refund, whatever fields it carries.
//   - TRADE_SUCCESS (partial refund) or TRADE_CLOSED (full refund) with refund fields
//     (refund_fee other than 0, gmt_refund or out_biz_no) is a refund, never a payment
//     nor a failed payment. With refund_fee and gmt_refund (money went back):
//     RefundSucceeded, RefundID = out_biz_no (the refund's out_request_no; "" for a refund
//     made in Alipay's console, which the payment service records and ignores), Amount =
//     refund_fee, which Alipay reports as the total refunded on the trade so far (equal
//     to the refund for a trade's first refund), OccurredAt = gmt_refund. Without either:
//     Ignored (acknowledged; alipay.trade.fastpay.refund.query confirms the refund).
//   - TRADE_CLOSED without refund fields: PaymentFailed (closed unpaid), OccurredAt =
//     gmt_close.
//   - WAIT_BUYER_PAY: PaymentPending.
func (a *Adapter) Verify(_ http.Header, body []byte, _ time.Time) (*channel.Notification, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "alipay notification: body is not form-urlencoded")
	}
	params := make(map[string]string, len(form))
	for k, vs := range form {
		if len(vs) != 1 {
			return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "alipay notification: parameter %q appears %d times", k, len(vs))
		}
		params[k] = vs[0]
	}
	signature := params["sign"]
	if signature == "" {
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "alipay notification: no sign")
	}
	if st := params["sign_type"]; st != "RSA2" {
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "alipay notification: sign_type %q is refused, only RSA2 is accepted", st)
	}
	if !verify(a.cfg.AlipayPublicKey, []byte(SignContent(params, "sign", "sign_type")), signature) {
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "alipay notification: signature does not verify with the Alipay public key")
	}
	n, err := a.decode(params)
	if err != nil {
		return nil, err
	}
	n.Body = body
	return n, nil
}

func (a *Adapter) decode(p map[string]string) (*channel.Notification, error) {
	switch {
	case p["app_id"] != a.cfg.AppID:
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: app_id %q is not this channel's app", p["app_id"])
	case p["seller_id"] != a.cfg.SellerID:
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: seller_id %q is not this channel's seller", p["seller_id"])
	case p["notify_id"] == "":
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: no notify_id")
	case p["out_trade_no"] == "":
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: no out_trade_no")
	}
	n := &channel.Notification{
		Channel:      Name,
		EventID:      p["notify_id"],
		PaymentID:    channel.PaymentIDFromOutTradeNo(p["out_trade_no"]),
		ChannelTxnID: p["trade_no"],
		Currency:     a.cfg.Currency,
	}
	status := p["trade_status"]
	// A refund notification carries refund_fee (the trade's total refunded so far),
	// gmt_refund and out_biz_no (the refund's out_request_no); a payment notification may
	// carry refund_fee "0.00", which is no refund.
	refundFee := p["refund_fee"]
	if fee, err := channel.ParseDecimal(refundFee, a.cfg.Currency); err == nil && fee == 0 {
		refundFee = ""
	}
	refund := refundFee != "" || p["gmt_refund"] != "" || p["out_biz_no"] != ""
	var amountField, timeField string
	switch {
	case status == TradeFinished || (status == TradeSuccess && !refund):
		n.Kind, amountField, timeField = channel.PaymentSucceeded, "total_amount", "gmt_payment"
		if n.ChannelTxnID == "" {
			return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: %s without trade_no", status)
		}
	case refund && (status == TradeSuccess || status == TradeClosed) && (refundFee == "" || p["gmt_refund"] == ""):
		// About a refund without saying that money went back (no amount or no time): not a
		// payment, not a confirmation; the refund query decides.
		n.Kind, amountField, timeField = channel.Ignored, "total_amount", "notify_time"
	case refund && (status == TradeSuccess || status == TradeClosed):
		n.Kind, amountField, timeField = channel.RefundSucceeded, "refund_fee", "gmt_refund"
		n.RefundID = p["out_biz_no"] // "" for a refund orderly did not ask (made in Alipay's console)
	case status == TradeClosed:
		n.Kind, amountField, timeField = channel.PaymentFailed, "total_amount", "gmt_close"
	case status == TradeWaitBuyerPay:
		n.Kind, amountField, timeField = channel.PaymentPending, "total_amount", "gmt_create"
	default:
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: unknown trade_status %q", status)
	}
	amount, err := channel.ParseDecimal(p[amountField], a.cfg.Currency)
	if err != nil {
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: %s: %s", amountField, orderly.ErrorMessage(err))
	}
	n.Amount = amount
	at := p[timeField]
	if at == "" {
		at = p["notify_time"]
	}
	t, err := time.ParseInLocation(timeLayout, at, beijing)
	if err != nil {
		return nil, orderly.Errorf(orderly.EINVALID, "alipay notification: time %q is not %q in Beijing time", at, timeLayout)
	}
	n.OccurredAt = t.UTC()
	return n, nil
}

// Ack implements channel.Adapter: the body Alipay expects, exactly "success" (status 200)
// when err is nil, so Alipay stops retrying; "fail" otherwise (401 for EUNAUTHORIZED, 422
// for another refusal, 503 for EUNAVAILABLE, 500 else), and Alipay retries (about 8 times
// over 25 h: 4m, 10m, 10m, 1h, 2h, 6h, 15h).
func (a *Adapter) Ack(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err == nil {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "success")
		return
	}
	w.WriteHeader(ackStatus(err))
	_, _ = io.WriteString(w, "fail")
}

// ackStatus is the HTTP status of a failure acknowledgement.
func ackStatus(err error) int {
	switch orderly.ErrorCode(err) {
	case orderly.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case orderly.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case orderly.EINTERNAL:
		return http.StatusInternalServerError
	default:
		return http.StatusUnprocessableEntity
	}
}
