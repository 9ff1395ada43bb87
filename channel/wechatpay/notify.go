package wechatpay

import (
	"cmp"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// Headers of a signed WeChat Pay message (notification or response).
const (
	HeaderTimestamp     = "Wechatpay-Timestamp"      // unix seconds
	HeaderNonce         = "Wechatpay-Nonce"          // random string
	HeaderSignature     = "Wechatpay-Signature"      // base64 SHA256withRSA
	HeaderSerial        = "Wechatpay-Serial"         // platform certificate serial or PUB_KEY_ID_…
	HeaderSignatureType = "Wechatpay-Signature-Type" // WECHATPAY2-SHA256-RSA2048 when sent
)

// SignatureType is the only signature scheme accepted.
const SignatureType = "WECHATPAY2-SHA256-RSA2048"

// ProbePrefix starts the signature of WeChat Pay's probe requests (签名探测流量), which must
// fail verification.
const ProbePrefix = "WECHATPAY/SIGNTEST/"

// Event types of notifications (event_type).
const (
	EventTransactionSuccess = "TRANSACTION.SUCCESS"
	EventRefundSuccess      = "REFUND.SUCCESS"
	EventRefundAbnormal     = "REFUND.ABNORMAL"
	EventRefundClosed       = "REFUND.CLOSED"
)

// verifySignature checks a signed WeChat Pay message: the Wechatpay-* headers and
// SHA256withRSA over "timestamp\nnonce\nbody\n" with the key of the serial. Errors:
// *orderly.Error EUNAUTHORIZED.
func (a *Adapter) verifySignature(h http.Header, body []byte, now time.Time) error {
	ts, nonce, sig, serial := h.Get(HeaderTimestamp), h.Get(HeaderNonce), h.Get(HeaderSignature), h.Get(HeaderSerial)
	switch {
	case ts == "" || nonce == "" || sig == "" || serial == "":
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: missing Wechatpay-Timestamp, -Nonce, -Signature or -Serial")
	case strings.HasPrefix(sig, ProbePrefix):
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: signature probe")
	}
	if st := h.Get(HeaderSignatureType); st != "" && st != SignatureType {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: signature type %q is refused", st)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: Wechatpay-Timestamp %q is not unix seconds", ts)
	}
	if d := now.Unix() - sec; d >= int64(Window/time.Second) || -d >= int64(Window/time.Second) {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: timestamp %d is %d s from now, outside the %s window", sec, d, Window)
	}
	key, ok := a.keys[normalSerial(serial)]
	if !ok {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: no platform key for serial %q", serial)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: Wechatpay-Signature is not base64")
	}
	msg := make([]byte, 0, len(ts)+len(nonce)+len(body)+3)
	msg = append(append(append(append(append(append(msg, ts...), '\n'), nonce...), '\n'), body...), '\n')
	digest := sha256.Sum256(msg)
	if rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], raw) != nil {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "wechatpay: signature does not verify with the key of serial %s", serial)
	}
	return nil
}

// envelope is a notification's body.
type envelope struct {
	ID           string `json:"id"`
	CreateTime   string `json:"create_time"`
	EventType    string `json:"event_type"`
	ResourceType string `json:"resource_type"`
	Summary      string `json:"summary"`
	Resource     struct {
		Algorithm      string `json:"algorithm"`
		Ciphertext     string `json:"ciphertext"`
		AssociatedData string `json:"associated_data"`
		OriginalType   string `json:"original_type"`
		Nonce          string `json:"nonce"`
	} `json:"resource"`
}

// transaction is the decrypted resource of TRANSACTION.* and the answer of a query.
type transaction struct {
	AppID         string `json:"appid"`
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	TradeState    string `json:"trade_state"`
	SuccessTime   string `json:"success_time"`
	Amount        struct {
		Total         *int64 `json:"total"`
		PayerTotal    int64  `json:"payer_total"`
		Currency      string `json:"currency"`
		PayerCurrency string `json:"payer_currency"`
	} `json:"amount"`
}

// refund is the decrypted resource of REFUND.*.
type refund struct {
	MchID         string `json:"mchid"`
	OutTradeNo    string `json:"out_trade_no"`
	TransactionID string `json:"transaction_id"`
	OutRefundNo   string `json:"out_refund_no"`
	RefundID      string `json:"refund_id"`
	RefundStatus  string `json:"refund_status"`
	SuccessTime   string `json:"success_time"`
	Amount        struct {
		Total  int64  `json:"total"`
		Refund *int64 `json:"refund"`
	} `json:"amount"`
}

// Verify implements channel.Adapter for WeChat Pay API v3 notifications (支付通知 and
// 退款结果通知). The headers Wechatpay-Timestamp, -Nonce, -Signature and -Serial are
// required (Wechatpay-Signature-Type, when sent, must be WECHATPAY2-SHA256-RSA2048); the
// signature is SHA256withRSA over "timestamp\nnonce\nbody\n" on the raw body, with the key
// Config.PlatformKeys holds for the serial (a platform certificate, or the WeChat Pay public
// key for a serial starting PUB_KEY_ID_); the timestamp must be less than Window from now;
// a signature starting ProbePrefix is a probe and fails. The resource is then decrypted
// with AEAD_AES_256_GCM (key Config.APIv3Key, its nonce, its associated_data).
//
// Errors (*orderly.Error): EUNAUTHORIZED for missing headers, a probe, a timestamp outside
// the window, an unknown serial or a signature that does not verify; EINVALID for an
// authentic body that is not a notification, a resource that does not decrypt with the
// APIv3 key, another mchid or appid, a missing id, out_trade_no or amount.
//
// Mapping (Amount in minor units, EventID = the notification id):
//   - TRANSACTION.SUCCESS (trade_state SUCCESS): PaymentSucceeded, Amount = amount.total
//     — the order total, not payer_total, which is less after a discount WeChat Pay or a
//     bank funded —, Currency = amount.currency, ChannelTxnID = transaction_id,
//     OccurredAt = success_time.
//   - REFUND.SUCCESS: RefundSucceeded, Amount = amount.refund, RefundID = RefundKey(out_refund_no),
//     ChannelTxnID = transaction_id, OccurredAt = success_time.
//   - REFUND.CLOSED: RefundFailed (final: the refund was closed, no money moved).
//   - REFUND.ABNORMAL: Ignored, with PaymentID and RefundID set. WeChat's documentation
//     does not make it final: the money could not reach the buyer's account (card
//     cancelled or frozen) and the merchant resolves it in the merchant platform or with
//     the abnormal-refund API, after which REFUND.SUCCESS (or CLOSED) follows. Reading it as
//     failed would make the amount refundable again while the first refund may still be
//     paid out, so the refund stays requested in orderly until the final notification;
//     reconciliation shows it as a refund not yet confirmed.
//   - any other event type: Ignored (acknowledged, nothing applied).
func (a *Adapter) Verify(header http.Header, body []byte, now time.Time) (*channel.Notification, error) {
	if err := a.verifySignature(header, body, now); err != nil {
		return nil, err
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: body is not JSON: %v", err)
	}
	if env.ID == "" {
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: no id")
	}
	n := &channel.Notification{Channel: Name, EventID: env.ID, Kind: channel.Ignored, Currency: a.cfg.Currency, Body: body}
	created, err := parseTime(env.CreateTime)
	if err != nil {
		return nil, err
	}
	n.OccurredAt = created
	switch env.EventType {
	case EventTransactionSuccess:
		var t transaction
		if err := a.decrypt(&env, &t); err != nil {
			return nil, err
		}
		return a.transactionNotification(n, &t)
	case EventRefundSuccess, EventRefundClosed, EventRefundAbnormal:
		var r refund
		if err := a.decrypt(&env, &r); err != nil {
			return nil, err
		}
		return a.refundNotification(n, env.EventType, &r)
	default:
		return n, nil
	}
}

func (a *Adapter) transactionNotification(n *channel.Notification, t *transaction) (*channel.Notification, error) {
	switch {
	case t.MchID != a.cfg.MchID:
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: mchid %q is not this channel's merchant", t.MchID)
	case a.cfg.AppID != "" && t.AppID != a.cfg.AppID:
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: appid %q is not this channel's app", t.AppID)
	case t.OutTradeNo == "" || t.TransactionID == "":
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: no out_trade_no or transaction_id")
	case t.TradeState != "SUCCESS":
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: TRANSACTION.SUCCESS with trade_state %q", t.TradeState)
	case t.Amount.Total == nil || *t.Amount.Total < 0:
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: no amount.total")
	}
	currency := cmp.Or(t.Amount.Currency, a.cfg.Currency)
	if !orderly.ValidCurrency(currency) {
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: currency %q is not an ISO 4217 currency", currency)
	}
	n.Kind, n.PaymentID, n.ChannelTxnID = channel.PaymentSucceeded, channel.PaymentIDFromOutTradeNo(t.OutTradeNo), t.TransactionID
	n.Amount, n.Currency = *t.Amount.Total, currency
	if t.SuccessTime != "" {
		at, err := parseTime(t.SuccessTime)
		if err != nil {
			return nil, err
		}
		n.OccurredAt = at
	}
	return n, nil
}

func (a *Adapter) refundNotification(n *channel.Notification, event string, r *refund) (*channel.Notification, error) {
	switch {
	case r.MchID != a.cfg.MchID:
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: mchid %q is not this channel's merchant", r.MchID)
	case r.OutTradeNo == "" || r.OutRefundNo == "":
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: refund without out_trade_no or out_refund_no")
	case r.Amount.Refund == nil || *r.Amount.Refund < 0:
		return nil, orderly.Errorf(orderly.EINVALID, "wechatpay notification: refund without amount.refund")
	}
	n.PaymentID, n.ChannelTxnID, n.RefundID = channel.PaymentIDFromOutTradeNo(r.OutTradeNo), r.TransactionID, RefundKey(r.OutRefundNo)
	n.Amount = *r.Amount.Refund
	switch event {
	case EventRefundSuccess:
		n.Kind = channel.RefundSucceeded
	case EventRefundClosed:
		n.Kind = channel.RefundFailed
	default: // REFUND.ABNORMAL: not final, see Verify
		n.Kind = channel.Ignored
	}
	if r.SuccessTime != "" {
		at, err := parseTime(r.SuccessTime)
		if err != nil {
			return nil, err
		}
		n.OccurredAt = at
	}
	return n, nil
}

// decrypt opens the notification's resource with AEAD_AES_256_GCM and decodes it into out.
func (a *Adapter) decrypt(env *envelope, out any) error {
	res := env.Resource
	if res.Algorithm != "AEAD_AES_256_GCM" {
		return orderly.Errorf(orderly.EINVALID, "wechatpay notification: resource algorithm %q, want AEAD_AES_256_GCM", res.Algorithm)
	}
	plain, err := Decrypt(a.cfg.APIv3Key, res.Nonce, res.AssociatedData, res.Ciphertext)
	if err != nil {
		return orderly.Errorf(orderly.EINVALID, "wechatpay notification: resource does not decrypt with the APIv3 key")
	}
	if err := json.Unmarshal(plain, out); err != nil {
		return orderly.Errorf(orderly.EINVALID, "wechatpay notification: resource is not JSON: %v", err)
	}
	return nil
}

// Decrypt opens a resource encrypted with AEAD_AES_256_GCM: apiV3Key (32 bytes) is the
// key, nonce the resource's nonce string (12 bytes), associatedData its associated_data
// and ciphertext the base64 of the encrypted text followed by its 16-byte tag. Errors: a
// key of another length, malformed base64, or a text or tag that does not authenticate.
func Decrypt(apiV3Key, nonce, associatedData, ciphertext string) ([]byte, error) {
	block, err := aes.NewCipher([]byte(apiV3Key))
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCMWithNonceSize(block, len(nonce))
	if err != nil {
		return nil, err
	}
	ct, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil {
		return nil, err
	}
	return gcm.Open(nil, []byte(nonce), ct, []byte(associatedData))
}

// parseTime reads WeChat Pay's RFC 3339 times ("2024-05-01T12:00:00+08:00") as UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, orderly.Errorf(orderly.EINVALID, "wechatpay notification: time %q is not RFC 3339", s)
	}
	return t.UTC(), nil
}

// Ack implements channel.Adapter: 204 and no body when err is nil, so WeChat Pay stops
// retrying; otherwise the failure answer {"code":"FAIL","message":…} with 401 for
// EUNAUTHORIZED, 400 for another refusal, 503 for EUNAVAILABLE and 500 else (the message is
// orderly.ErrorMessage: never an internal error's detail), and WeChat Pay retries (15 s up
// to 6 h, over about 24 h).
func (a *Adapter) Ack(w http.ResponseWriter, err error) {
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	status := http.StatusBadRequest
	switch orderly.ErrorCode(err) {
	case orderly.EUNAUTHORIZED:
		status = http.StatusUnauthorized
	case orderly.EUNAVAILABLE:
		status = http.StatusServiceUnavailable
	case orderly.EINTERNAL:
		status = http.StatusInternalServerError
	}
	b, _ := json.Marshal(map[string]string{"code": "FAIL", "message": orderly.ErrorMessage(err)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
