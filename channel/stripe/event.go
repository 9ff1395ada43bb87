package stripe

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// MetadataPaymentID and MetadataRefundID are the metadata keys orderly sets on the objects it
// creates at Stripe (payment intents, refunds) and reads back from events. A Checkout
// Session created by the shop names the payment in client_reference_id or in its metadata.
const (
	MetadataPaymentID = "payment_id"
	MetadataRefundID  = "refund_id"
)

// event is the part of a Stripe event orderly reads.
type event struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Created    int64  `json:"created"`
	APIVersion string `json:"api_version"`
	Data       struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// object is the union of the fields orderly reads from a payment intent, a checkout
// session, a charge and a refund.
type object struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Amount            int64             `json:"amount"`
	AmountReceived    int64             `json:"amount_received"`
	AmountTotal       int64             `json:"amount_total"`
	AmountRefunded    int64             `json:"amount_refunded"`
	Currency          string            `json:"currency"`
	Status            string            `json:"status"`
	PaymentStatus     string            `json:"payment_status"`
	PaymentIntent     json.RawMessage   `json:"payment_intent"` // an id, or the expanded object
	ClientReferenceID string            `json:"client_reference_id"`
	Metadata          map[string]string `json:"metadata"`
	Refunds           *struct {
		Data []object `json:"data"`
	} `json:"refunds"`
}

// paymentIntentID returns the id of o's payment intent, expanded or not.
func (o *object) paymentIntentID() string {
	var id string
	if json.Unmarshal(o.PaymentIntent, &id) == nil {
		return id
	}
	var pi struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(o.PaymentIntent, &pi)
	return pi.ID
}

// decode maps a verified event to a notification and returns the event's api_version.
// Events orderly does not act on, and payment events naming no orderly payment (another
// system's payments on the same account), are Ignored. The fields read — a payment
// intent's id, amount, amount_received, currency, status and metadata; a refund's id,
// amount, currency, status, payment_intent and metadata; a checkout session's
// amount_total, payment_intent, client_reference_id and payment_status — have the same
// shape in every API version since 2022-11-15; charge.refunded names a refund only through
// the charge's refunds list, which those versions leave out, so it is read only when
// present. Refund events confirm a refund only when its status is succeeded; pending and
// requires_action are PaymentPending (recorded, nothing changes). Errors: EINVALID for a
// malformed event or amount.
func decode(name string, body []byte) (*channel.Notification, string, error) {
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" || ev.Type == "" {
		return nil, "", orderly.Errorf(orderly.EINVALID, "the body is not a Stripe event (id, type, data.object)")
	}
	n := &channel.Notification{Channel: name, EventID: ev.ID, Kind: channel.Ignored,
		OccurredAt: time.Unix(ev.Created, 0).UTC(), Body: body}
	var o object
	if len(ev.Data.Object) > 0 {
		if err := json.Unmarshal(ev.Data.Object, &o); err != nil {
			return nil, "", orderly.Errorf(orderly.EINVALID, "event %s: data.object is malformed: %v", ev.ID, err)
		}
	}
	amount := int64(0)
	switch ev.Type {
	case "payment_intent.succeeded":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentSucceeded, o.ID, o.AmountReceived
	case "payment_intent.payment_failed", "payment_intent.canceled":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentFailed, o.ID, o.Amount
	case "payment_intent.processing", "payment_intent.requires_action":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentPending, o.ID, o.Amount
	case "checkout.session.completed":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentPending, o.paymentIntentID(), o.AmountTotal
		if o.PaymentStatus == "paid" {
			n.Kind = channel.PaymentSucceeded
		}
	case "checkout.session.async_payment_succeeded":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentSucceeded, o.paymentIntentID(), o.AmountTotal
	case "checkout.session.async_payment_failed", "checkout.session.expired":
		n.Kind, n.ChannelTxnID, amount = channel.PaymentFailed, o.paymentIntentID(), o.AmountTotal
	case "refund.created", "refund.updated", "refund.failed", "charge.refund.updated":
		// data.object is the refund in each.
		n.Kind, n.ChannelTxnID, amount = refundKind(o.Status), o.paymentIntentID(), o.Amount
		n.RefundID = o.Metadata[MetadataRefundID]
	case "charge.refunded":
		// The newest refund, when the event carries the list (versions before 2022-11-15),
		// names orderly's refund; amount_refunded alone (the charge's total) names none.
		n.ChannelTxnID = o.paymentIntentID()
		if o.Refunds == nil || len(o.Refunds.Data) == 0 {
			return n, ev.APIVersion, nil
		}
		newest := o.Refunds.Data[0]
		n.Kind, n.RefundID, amount = refundKind(newest.Status), newest.Metadata[MetadataRefundID], newest.Amount
	default:
		return n, ev.APIVersion, nil
	}
	n.PaymentID = o.Metadata[MetadataPaymentID]
	if n.PaymentID == "" && o.Object == "checkout.session" {
		n.PaymentID = o.ClientReferenceID
	}
	if n.PaymentID == "" && n.RefundID != "" {
		n.PaymentID, _ = strings.CutPrefix(n.RefundID, "payment:")
	}
	if n.PaymentID == "" && n.RefundID == "" {
		n.Kind = channel.Ignored // not a payment orderly started
		return n, ev.APIVersion, nil
	}
	if o.Currency != "" {
		minor, cur, err := ToMinor(amount, o.Currency)
		if err != nil {
			return nil, "", orderly.Errorf(orderly.EINVALID, "event %s: %v", ev.ID, err)
		}
		n.Amount, n.Currency = minor, cur
	}
	return n, ev.APIVersion, nil
}

// refundKind maps a refund's status: succeeded confirms it, failed and canceled fail it
// (final), anything else (pending, requires_action) is not final.
func refundKind(status string) channel.Kind {
	switch status {
	case "succeeded":
		return channel.RefundSucceeded
	case "failed", "canceled":
		return channel.RefundFailed
	}
	return channel.PaymentPending
}
