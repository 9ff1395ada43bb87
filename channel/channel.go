// Package channel connects orderly to real payment providers (Stripe, Alipay, WeChat Pay).
//
// Each provider is one subpackage implementing Adapter: the outbound calls (orderly.Gateway:
// create, query, close, refund) and the verification and decoding of its inbound
// notifications, byte-exactly the way the provider signs them. The adapters know nothing
// of orders: the engine routes a verified Notification to the payment service, which
// applies it through the state machine, and answers the provider with the adapter's Ack.
package channel

import (
	"net/http"
	"time"

	"github.com/orderlyhq/orderly"
)

// Kind says what a verified notification reports, in terms common to every provider.
type Kind string

// Notification kinds.
const (
	// PaymentSucceeded: money was captured for PaymentID (Stripe payment_intent.succeeded,
	// checkout.session.completed with payment_status "paid",
	// checkout.session.async_payment_succeeded; Alipay TRADE_SUCCESS or TRADE_FINISHED;
	// WeChat TRANSACTION.SUCCESS).
	PaymentSucceeded Kind = "payment_succeeded"
	// PaymentFailed: the attempt ended without a capture (failed, canceled, expired, closed
	// unpaid).
	PaymentFailed Kind = "payment_failed"
	// PaymentPending: acknowledged, nothing to apply yet (e.g. a checkout completed with an
	// asynchronous payment still pending).
	PaymentPending Kind = "payment_pending"
	// RefundSucceeded: the provider confirmed a refund of Amount (partial refunds included).
	RefundSucceeded Kind = "refund_succeeded"
	// RefundFailed: the provider refused or failed a refund (final).
	RefundFailed Kind = "refund_failed"
	// Ignored: a verified notification orderly does not act on; it is acknowledged.
	Ignored Kind = "ignored"
)

// Notification is one verified inbound notification, decoded. Amount is in minor units of
// Currency (converted exactly with orderly.CurrencyExponent; zero-decimal currencies such
// as JPY stay as they are).
type Notification struct {
	Channel string // the adapter's Name
	// EventID identifies the notification at the provider and is stable across its
	// retries (Stripe event id, Alipay notify_id, WeChat notification id): the dedupe key.
	EventID string
	Kind    Kind
	// PaymentID is orderly's payment id as sent to the provider when the attempt was created
	// (Stripe metadata or client_reference_id, Alipay and WeChat out_trade_no).
	PaymentID    string
	ChannelTxnID string // the provider's transaction id (payment intent, trade_no, transaction_id)
	// Amount is, for payments, the order total the provider charged for (WeChat amount.total,
	// not payer_total: a provider-funded discount does not make it a mismatch); for refunds,
	// the amount refunded.
	Amount   int64
	Currency string
	RefundID string // for refund kinds: orderly's refund idempotency key as sent (out_refund_no, metadata)
	// UnexpectedVersion is the event's API version when it is not the one the adapter pins
	// (Stripe's api_version); "" otherwise. The notification is decoded all the same, where
	// its shape is known, and counted in orderly_channel_event_version_mismatches_total.
	UnexpectedVersion string
	// OccurredAt is when the provider says the event happened (UTC).
	OccurredAt time.Time
	Body       []byte // the raw body as received
}

// Adapter is one payment provider.
type Adapter interface {
	// Gateway is the outbound side. Cancel is the provider's close (Stripe cancel or
	// expire, Alipay trade close, WeChat close order) and answers GatewaySucceeded when the
	// payment was captured before it could be closed. Every call carries the provider's
	// idempotency mechanism per operation, so a retry never acts twice.
	orderly.Gateway
	// Name is the channel's name as recorded on payments ("stripe", "alipay", "wechat").
	Name() string
	// Verify authenticates an inbound request over its raw body and decodes it; now is
	// the clock for the provider's replay window. Errors: *orderly.Error with code
	// EUNAUTHORIZED (bad or missing signature, timestamp outside the window, probe
	// request) or EINVALID (authentic but malformed, or a field that fails the adapter's
	// checks such as another app_id or seller_id). Nothing is applied on error.
	Verify(header http.Header, body []byte, now time.Time) (*Notification, error)
	// Ack writes the provider's acknowledgement: err nil means handled (or a duplicate),
	// so the provider stops retrying; otherwise the provider's failure answer, so it
	// retries (or stops, for a refusal the provider should not retry).
	Ack(w http.ResponseWriter, err error)
}
