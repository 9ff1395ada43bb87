package orderly

import (
	"context"
	"strings"
	"time"
)

// PaymentState is the state of one payment attempt. The store keeps a CHECK constraint
// with the same list.
type PaymentState string

// Payment states. A success for an order that is no longer pending payment (closed, or paid
// by another attempt) goes succeeded → refund_pending → refunded (I2). A second capture of
// an attempt (the provider reports another channel transaction for it) is its own payment,
// with DuplicateOf set, written refund_pending and refunded.
const (
	PaymentInitiated     PaymentState = "initiated"      // started at the gateway, no outcome yet
	PaymentSucceeded     PaymentState = "succeeded"      // captured and applied to the order
	PaymentFailed        PaymentState = "failed"         // failed, expired or cancelled at the gateway
	PaymentRefundPending PaymentState = "refund_pending" // captured, refund requested through the outbox
	PaymentRefunded      PaymentState = "refunded"       // refund confirmed by the gateway
)

// Payment is one payment attempt for an order, or one extra capture of an attempt
// (DuplicateOf set). Amount is in minor units of Currency.
type Payment struct {
	ID      string `json:"payment_id"`
	OrderID string `json:"order_id"`
	Attempt int64  `json:"attempt"` // 1, 2, … per order; extra captures are numbered too
	Channel string `json:"channel"`
	// Variant is the version of Channel the attempt was made on ("v2"), "" when the channel
	// has one version; the attempt's route is Channel@Variant (see Route).
	Variant      string       `json:"variant"`
	ChannelTxnID string       `json:"channel_txn_id,omitempty"` // the gateway's transaction id, unique
	Amount       int64        `json:"amount"`
	Currency     string       `json:"currency"`
	State        PaymentState `json:"state"`
	FailReason   string       `json:"fail_reason,omitempty"`
	CreatedAt    time.Time    `json:"created_at"`
	SucceededAt  *time.Time   `json:"succeeded_at,omitempty"`
	RefundedAt   *time.Time   `json:"refunded_at,omitempty"`
	// DuplicateOf, when set, is the attempt that this row captured again: the provider
	// reported a second channel transaction for it. Such a row is never applied to its
	// order; it is refunded.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// ProviderRef is the provider's id of the object the attempt created (Stripe PaymentIntent
	// "pi_…", WeChat Pay prepay_id, Alipay out_trade_no), stored when the provider answered
	// the create. Query, cancel and refund name the object by it.
	ProviderRef string `json:"provider_ref,omitempty"`
	// PayerID is the payer's id at the provider given at start (a WeChat openid), "" if none.
	PayerID string `json:"payer_id,omitempty"`
	// NextAction is what the buyer's client needs to pay the attempt at its provider (the
	// handoff), nil for a channel that needs none.
	NextAction *NextAction `json:"next_action,omitempty"`
	// Metadata is the merchant's own data (set at start, changed by PATCH).
	Metadata Metadata `json:"metadata,omitempty"`
}

// Next action types (NextAction.Type).
const (
	// NextActionStripeSDK: confirm the PaymentIntent ProviderRef in the browser or app with
	// Stripe.js or a Stripe mobile SDK and ClientSecret.
	NextActionStripeSDK = "use_stripe_sdk"
	// NextActionDisplayQRCode: show QRCode (Alipay precreate qr_code, WeChat Pay Native
	// code_url) for the buyer to scan with the provider's app.
	NextActionDisplayQRCode = "display_qr_code"
	// NextActionRedirectToURL: send the buyer's browser to URL (Alipay page or wap pay).
	NextActionRedirectToURL = "redirect_to_url"
	// NextActionWeChatJSAPI: call WeixinJSBridge getBrandWCPayRequest (or wx.requestPayment
	// in a mini program) with WeChatJSAPI.
	NextActionWeChatJSAPI = "wechat_jsapi"
)

// NextAction is the handoff of a payment attempt: what the buyer's client needs to complete
// it at the provider. Type says which members are set. It holds nothing secret of the
// merchant: a client_secret and a paySign are made for the buyer's client.
type NextAction struct {
	Type         string `json:"type"`                    // one of the NextAction* constants
	ClientSecret string `json:"client_secret,omitempty"` // Stripe PaymentIntent client_secret
	QRCode       string `json:"qr_code,omitempty"`       // the content of the QR code to show
	URL          string `json:"url,omitempty"`           // where to send the buyer's browser
	// WeChatJSAPI is the JSAPI / mini-program payment request, signed by the merchant's key.
	WeChatJSAPI *WeChatJSAPI `json:"wechat_jsapi,omitempty"`
}

// WeChatJSAPI is the parameter object of WeChat Pay's JSAPI and mini-program payment
// (getBrandWCPayRequest, wx.requestPayment), with WeChat's own member names.
type WeChatJSAPI struct {
	AppID     string `json:"appId"`
	TimeStamp string `json:"timeStamp"` // unix seconds, as a string
	NonceStr  string `json:"nonceStr"`
	Package   string `json:"package"`  // "prepay_id=…"
	SignType  string `json:"signType"` // "RSA"
	PaySign   string `json:"paySign"`  // base64 SHA256withRSA of appId\ntimeStamp\nnonceStr\npackage\n
}

// Route returns the name of the channel variant that serves the attempt: Channel, or
// Channel + "@" + Variant when the attempt was made on a variant ("stripe@v2"). It names the
// adapter (channel.Adapter.Name) that created the attempt.
func (p *Payment) Route() string { return RouteName(p.Channel, p.Variant) }

// RouteName joins a channel and its variant: channel, or channel + "@" + variant
// ("stripe@v2"); SplitRoute reverses it.
func RouteName(channel, variant string) string {
	if variant == "" {
		return channel
	}
	return channel + "@" + variant
}

// SplitRoute splits a channel route name at its last "@" into the channel and the variant
// ("stripe@v2" → "stripe", "v2"; "stripe" → "stripe", "").
func SplitRoute(route string) (channel, variant string) {
	if i := strings.LastIndexByte(route, '@'); i > 0 && i < len(route)-1 {
		return route[:i], route[i+1:]
	}
	return route, ""
}

// Callback statuses.
const (
	CallbackSucceeded = "succeeded"
	CallbackFailed    = "failed"
	CallbackExpired   = "expired"
)

// Callback is a payment gateway's notification of an attempt's outcome, after its signature
// was verified. Amount is in minor units of Currency.
type Callback struct {
	PaymentID    string    `json:"payment_id"`
	OrderID      string    `json:"order_id"`
	ChannelTxnID string    `json:"channel_txn_id"`
	Amount       int64     `json:"amount"`
	Currency     string    `json:"currency"`
	Status       string    `json:"status"` // CallbackSucceeded, CallbackFailed or CallbackExpired
	OccurredAt   time.Time `json:"occurred_at"`
	// Body is the signed request body as received, kept with a refusal (nil: the callback
	// is stored as the JSON of the fields above).
	Body []byte `json:"-"`
}

// Reasons why a signed callback is refused (CallbackRefusal.Reason). The store keeps a
// CHECK constraint with the same list.
const (
	RefusalInvalidInput       = "invalid_input"        // the body is malformed or a field breaks a rule (422)
	RefusalInvalidStatus      = "invalid_status"       // status is not succeeded, failed or expired (422)
	RefusalUnknownPayment     = "unknown_payment"      // no payment has payment_id (404)
	RefusalOrderMismatch      = "order_mismatch"       // the payment belongs to another order (422)
	RefusalAmountMismatch     = "amount_mismatch"      // a success for another amount than the attempt's (422)
	RefusalCurrencyMismatch   = "currency_mismatch"    // another currency than the attempt's (422)
	RefusalChannelTxnConflict = "channel_txn_conflict" // channel_txn_id is recorded on another payment (409)
)

// CallbackRefusal is a signed callback that was refused, as kept for operators: what it
// said (Amount in minor units of Currency), why it was refused (Reason, one of the
// Refusal* constants, and Detail, the problem's detail) and its body. Money a provider says
// it took and we did not apply is found here.
type CallbackRefusal struct {
	ID           int64     `json:"id"`
	PaymentID    string    `json:"payment_id"` // as named by the callback: it may be unknown
	OrderID      string    `json:"order_id"`
	Reason       string    `json:"reason"`
	Detail       string    `json:"detail"`
	Status       string    `json:"status"`
	Amount       int64     `json:"amount"`
	Currency     string    `json:"currency"`
	ChannelTxnID string    `json:"channel_txn_id,omitempty"`
	Body         string    `json:"body"`
	CreatedAt    time.Time `json:"created_at"`
}

// CallbackResult says what a callback did.
type CallbackResult struct {
	// Applied is false for a duplicate: the callback was acknowledged and changed nothing.
	Applied bool `json:"applied"`
	// Refund is true when the payment succeeded for an order that no longer takes it
	// (closed, or paid by another attempt), or is a second capture of an attempt, and a
	// refund was requested.
	Refund  bool     `json:"refund"`
	Payment *Payment `json:"payment"`
}

// GatewayStatus is what a gateway says of an attempt when asked (payment inspection).
type GatewayStatus string

// Gateway statuses.
const (
	GatewayPending   GatewayStatus = "pending"   // no outcome yet
	GatewaySucceeded GatewayStatus = "succeeded" // captured
	GatewayFailed    GatewayStatus = "failed"    // failed, expired or cancelled
	GatewayUnknown   GatewayStatus = "unknown"   // the gateway could not tell (yet)
)

// GatewayPayment is a gateway's view of one attempt.
type GatewayPayment struct {
	Status       GatewayStatus
	ChannelTxnID string // set when Status is GatewaySucceeded
	Amount       int64  // minor units, set when Status is GatewaySucceeded
}

// GatewayAttempt is a gateway's answer to the creation of an attempt: the id of the object
// it created (stored as Payment.ProviderRef) and the handoff for the buyer's client (nil
// when the channel needs none).
type GatewayAttempt struct {
	ProviderRef string
	NextAction  *NextAction
}

// AttemptValidator is implemented by a Gateway that refuses some attempts before creating
// them, on what the attempt says alone (a currency the channel does not take, a JSAPI
// payment without a payer id). The payment service asks it before the attempt is written,
// so that such a refusal (an *Error, EINVALID) changes nothing.
type AttemptValidator interface {
	ValidateAttempt(p *Payment) error
}

// GatewayRefundResult is a gateway's view of one refund. Status is GatewaySucceeded once the
// provider confirms the money went back, GatewayPending while it is accepted but not final
// (Stripe pending or requires_action, WeChat Pay PROCESSING or ABNORMAL, Alipay without
// fund_change), GatewayFailed when the provider failed it after accepting it.
type GatewayRefundResult struct {
	Status      GatewayStatus
	ProviderRef string // the provider's refund id ("re_…", refund_id), when it has one
	Detail      string // the provider's state as it named it ("pending", "PROCESSING"), for logs and operators
}

// Gateway is a payment provider. Every method is idempotent per payment id, so the outbox
// may call it again after a crash. Errors are transient unless they are *Error.
type Gateway interface {
	// Create starts attempt p for p.Amount minor units of p.Currency and returns the
	// provider's object id and the buyer's handoff.
	Create(ctx context.Context, p *Payment) (*GatewayAttempt, error)
	// Query returns the gateway's view of attempt p (active payment inspection); p carries
	// the ProviderRef stored at create ("" for an attempt whose create was not answered).
	Query(ctx context.Context, p *Payment) (*GatewayPayment, error)
	// Cancel stops attempt p when it has no outcome. It returns the gateway's view after the
	// cancel: GatewaySucceeded when the payment was captured before it could be cancelled.
	Cancel(ctx context.Context, p *Payment) (*GatewayPayment, error)
	// Refund asks for r.Amount minor units of a captured payment back to the payer, once per
	// r.IdempotencyKey: asked again with the same key it refunds nothing more and answers
	// that refund's view. r.PaymentID names the payments row being refunded: for a second
	// capture (Payment.DuplicateOf set) it is that row's own id. An *Error means the gateway
	// refused the refund (it will not succeed if retried); GatewayPending means accepted,
	// not final: the outcome comes by notification or by QueryRefund.
	Refund(ctx context.Context, r *GatewayRefund) (*GatewayRefundResult, error)
	// QueryRefund returns the gateway's view of refund r, asked before (by its
	// IdempotencyKey, or r.ProviderRefundRef when the provider named it).
	QueryRefund(ctx context.Context, r *GatewayRefund) (*GatewayRefundResult, error)
}
