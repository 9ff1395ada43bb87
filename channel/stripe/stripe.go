// Package stripe is the Stripe channel (package channel): webhook deliveries verified over
// the raw body with the Stripe-Signature header (HMAC-SHA256 with the endpoint's signing
// secret, several secrets during a roll, 5-minute tolerance) and decoded into
// provider-neutral notifications; and the outbound calls of orderly.Gateway on Stripe's
// REST API (payment intents and refunds), every call pinned to APIVersion. Query, cancel
// and refund name the PaymentIntent by the id stored at create (Payment.ProviderRef), never
// through the search API, which Stripe documents as not read-after-write. It uses net/http
// only; Config.BaseURL points it at the imitation server of package stripetest in tests
// and simulations. docs/payments/stripe.md maps every Stripe state to orderly's.
package stripe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// DefaultBaseURL is Stripe's API.
const DefaultBaseURL = "https://api.stripe.com"

// APIVersion is the Stripe API version every outbound call is pinned to (header
// Stripe-Version), and the version the webhook endpoint must be created with so that
// events arrive in the shape decode reads: 2025-03-31.basil, the version stripe-go v82.0.0
// pins. An event of another version is logged and marked (Notification.UnexpectedVersion),
// which the payment service counts in orderly_channel_event_version_mismatches_total.
const APIVersion = "2025-03-31.basil"

// VersionHeader is the header that pins a call's API version.
const VersionHeader = "Stripe-Version"

// IdempotencyWindow is how long Stripe keeps an Idempotency-Key's first answer (at least
// 24 hours, docs.stripe.com/api/idempotent_requests). Within it, repeating the create of an
// attempt answers the PaymentIntent that create made; after it, the same request would make
// a new one, so the id of an attempt whose create was never answered is recovered only
// within an hour's margin of it.
const IdempotencyWindow = 23 * time.Hour

// Config configures an Adapter. Zero values mean the documented defaults.
type Config struct {
	// Name is the channel's name as recorded on payments and in the webhook route
	// (/v1/channels/{name}/webhook); "stripe".
	Name string
	// APIKey is the secret API key (sk_live_…, sk_test_… or a restricted rk_… key with
	// write access to payment intents and refunds). Required for the outbound calls. It
	// is sent to BaseURL only: never logged, never part of a handoff.
	APIKey string
	// WebhookSecrets are the signing secrets of the webhook endpoint ("whsec_…"), used as
	// Stripe shows them. Give two while rolling the secret: a delivery signed with either
	// is accepted. Required for Verify.
	WebhookSecrets []string
	// Tolerance is how far a delivery's signature timestamp may be from now; 5 minutes.
	Tolerance time.Duration
	// BaseURL is the API's address; DefaultBaseURL.
	BaseURL string
	// HTTPClient makes the outbound calls; http.DefaultClient. Its timeout, if any, adds
	// to the payment service's per-call timeout.
	HTTPClient *http.Client
	// Logger logs events whose api_version is not APIVersion; slog.Default().
	Logger *slog.Logger
}

// Adapter is the Stripe channel. It is safe for concurrent use. It keeps no state of its
// own about payments: every call names Stripe's objects by the ids orderly stored.
type Adapter struct {
	cfg Config
}

var _ channel.Adapter = (*Adapter)(nil)

// New returns an Adapter for cfg.
func New(cfg Config) *Adapter {
	cfg.Name = cmp.Or(cfg.Name, "stripe")
	cfg.Tolerance = cmp.Or(cfg.Tolerance, DefaultTolerance)
	cfg.BaseURL = strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Adapter{cfg: cfg}
}

// Name implements channel.Adapter.
func (a *Adapter) Name() string { return a.cfg.Name }

// Verify implements channel.Adapter: the Stripe-Signature header over body as received
// (a body re-encoded by a proxy fails), then the event decoded (decode). An event whose
// api_version is not APIVersion is logged and counted, and decoded all the same: the
// fields orderly reads are the same in every version since 2022-11-15 (docs/payments/
// stripe.md, "API version"). Errors: EUNAUTHORIZED (signature, timestamp outside the
// tolerance, no secret configured), EINVALID (not a Stripe event, a malformed amount).
func (a *Adapter) Verify(header http.Header, body []byte, now time.Time) (*channel.Notification, error) {
	if err := verifySignature(header.Get(SignatureHeader), body, a.cfg.WebhookSecrets, now, a.cfg.Tolerance); err != nil {
		return nil, err
	}
	n, version, err := decode(a.cfg.Name, body)
	if err != nil {
		return nil, err
	}
	if version != "" && version != APIVersion {
		n.UnexpectedVersion = version // counted by the payment service
		a.cfg.Logger.Warn("a Stripe event of another API version than the one orderly pins; create the webhook endpoint with api_version "+APIVersion,
			"channel", a.cfg.Name, "event_id", n.EventID, "api_version", version, "want", APIVersion)
	}
	return n, nil
}

// Ack implements channel.Adapter. Stripe stops retrying on any 2xx: 200 {"received":true}
// when err is nil; 400 for a refusal it should see in its dashboard (an *orderly.Error
// other than EUNAVAILABLE: bad signature, unknown payment, amount mismatch), 503 for a
// transient failure. Stripe retries every non-2xx for up to 3 days.
func (a *Adapter) Ack(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	status, body := http.StatusOK, map[string]any{"received": true}
	if err != nil {
		var refused *orderly.Error
		status = http.StatusServiceUnavailable
		msg := "temporarily unavailable; retry"
		if errors.As(err, &refused) && refused.Code != orderly.EUNAVAILABLE && refused.Code != orderly.EINTERNAL {
			status, msg = http.StatusBadRequest, refused.Message
		}
		body = map[string]any{"received": false, "error": msg}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// paymentIntent is the part of a payment intent the outbound calls read.
type paymentIntent struct {
	ID             string            `json:"id"`
	Status         string            `json:"status"`
	Amount         int64             `json:"amount"`
	AmountReceived int64             `json:"amount_received"`
	Currency       string            `json:"currency"`
	ClientSecret   string            `json:"client_secret"`
	Metadata       map[string]string `json:"metadata"`
}

// refund is the part of a refund the outbound calls read.
type refund struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	Amount        int64             `json:"amount"`
	FailureReason string            `json:"failure_reason"`
	Metadata      map[string]string `json:"metadata"`
}

// apiError is Stripe's error body.
type apiError struct {
	Error struct {
		Type          string         `json:"type"`
		Code          string         `json:"code"`
		Message       string         `json:"message"`
		PaymentIntent *paymentIntent `json:"payment_intent"`
	} `json:"error"`
}

// callError is a non-2xx answer.
type callError struct {
	status int
	body   apiError
}

func (e *callError) Error() string {
	return fmt.Sprintf("stripe: %d %s: %s", e.status, cmp.Or(e.body.Error.Code, e.body.Error.Type), e.body.Error.Message)
}

// do calls the API: form-encoded params, Stripe-Version APIVersion, Idempotency-Key when
// key is set, out decoded from a 2xx answer. A non-2xx answer is a *callError (refusal
// turns the final ones into *orderly.Error); a transport error is returned wrapped.
func (a *Adapter) do(ctx context.Context, method, path string, params url.Values, key string, out any) error {
	var body io.Reader
	u := a.cfg.BaseURL + path
	if method == http.MethodGet && len(params) > 0 {
		u += "?" + params.Encode()
	} else if len(params) > 0 {
		body = strings.NewReader(params.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.cfg.APIKey)
	req.Header.Set(VersionHeader, APIVersion)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := a.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("stripe: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("stripe: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		ce := &callError{status: resp.StatusCode}
		_ = json.Unmarshal(raw, &ce.body)
		return ce
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("stripe: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// refusal turns a 4xx answer (but 409 and 429, which are worth a retry) into an
// *orderly.Error; other errors are returned as they are.
func refusal(op string, err error) error {
	var ce *callError
	if errors.As(err, &ce) && ce.status/100 == 4 && ce.status != http.StatusConflict && ce.status != http.StatusTooManyRequests {
		return orderly.Errorf(orderly.EINVALID, "stripe refused the %s: %s", op, cmp.Or(ce.body.Error.Message, strconv.Itoa(ce.status)))
	}
	return err
}

// ValidateAttempt implements orderly.AttemptValidator: an amount Stripe cannot take in its
// currency's unit is refused (EINVALID) before the attempt is written.
func (a *Adapter) ValidateAttempt(p *orderly.Payment) error {
	if _, _, err := FromMinor(p.Amount, p.Currency); err != nil {
		return orderly.Errorf(orderly.EINVALID, "stripe: %v", err)
	}
	return nil
}

// createKey is the Idempotency-Key of the create of attempt paymentID.
func createKey(paymentID string) string { return "orderly-create-" + paymentID }

// createParams are the parameters of the create of attempt p: the same for every repeat
// of it, as Stripe's idempotency requires (a repeat with other parameters is refused).
func createParams(p *orderly.Payment) (url.Values, error) {
	amount, cur, err := FromMinor(p.Amount, p.Currency)
	if err != nil {
		return nil, err
	}
	return url.Values{
		"amount": {strconv.FormatInt(amount, 10)}, "currency": {cur},
		"metadata[" + MetadataPaymentID + "]": {p.ID}, "metadata[order_id]": {p.OrderID},
		"automatic_payment_methods[enabled]": {"true"},
	}, nil
}

// Create implements orderly.Gateway: a PaymentIntent for p's amount with metadata
// payment_id and order_id, Idempotency-Key "orderly-create-<payment id>". It answers the
// intent's id (stored as p.ProviderRef) and the handoff NextAction{Type: use_stripe_sdk,
// ClientSecret: the intent's client_secret}, which the buyer's client confirms with
// Stripe.js or a mobile SDK and the shop's publishable key. Errors: EINVALID for an amount
// Stripe cannot express or a 4xx refusal; others are transient.
func (a *Adapter) Create(ctx context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	pi, err := a.createIntent(ctx, p)
	if err != nil {
		return nil, refusal("payment intent", err)
	}
	if pi.ID == "" || pi.ClientSecret == "" {
		return nil, fmt.Errorf("stripe: the payment intent of payment %s came back without id or client_secret", p.ID)
	}
	return &orderly.GatewayAttempt{ProviderRef: pi.ID,
		NextAction: &orderly.NextAction{Type: orderly.NextActionStripeSDK, ClientSecret: pi.ClientSecret}}, nil
}

// createIntent posts the create of attempt p: the same parameters and Idempotency-Key every
// time, so that a repeat within IdempotencyWindow answers the intent the first one made.
// Errors: EINVALID for an amount Stripe cannot express; do's.
func (a *Adapter) createIntent(ctx context.Context, p *orderly.Payment) (*paymentIntent, error) {
	params, err := createParams(p)
	if err != nil {
		return nil, orderly.Errorf(orderly.EINVALID, "stripe: %v", err)
	}
	var pi paymentIntent
	return &pi, a.do(ctx, http.MethodPost, "/v1/payment_intents", params, createKey(p.ID), &pi)
}

// intentOf returns the PaymentIntent id of attempt p: the one stored at create. For an
// attempt whose create was never answered (ProviderRef ""), it repeats the create with its
// Idempotency-Key, and Stripe answers the intent that create made (or makes it now, if the
// first request never arrived: no one holds its client_secret). Every failure of that is
// transient — a refused or mismatched repeat, an attempt older than IdempotencyWindow —
// because "no intent" would let the caller conclude the buyer cannot have paid.
func (a *Adapter) intentOf(ctx context.Context, p *orderly.Payment) (string, error) {
	if p.ProviderRef != "" {
		return p.ProviderRef, nil
	}
	if !p.CreatedAt.IsZero() && time.Since(p.CreatedAt) > IdempotencyWindow {
		return "", fmt.Errorf("stripe: payment %s has no stored payment intent and was created %s ago, beyond the idempotency window; its intent cannot be recovered safely",
			p.ID, time.Since(p.CreatedAt).Round(time.Minute))
	}
	pi, err := a.createIntent(ctx, p)
	if err != nil {
		return "", fmt.Errorf("stripe: recover the payment intent of payment %s by repeating its create: %w", p.ID, err)
	}
	if pi.ID == "" || pi.Metadata[MetadataPaymentID] != p.ID {
		return "", fmt.Errorf("stripe: the repeated create of payment %s answered intent %q of payment %q", p.ID, pi.ID, pi.Metadata[MetadataPaymentID])
	}
	return pi.ID, nil
}

// view maps a payment intent to the gateway's view of the attempt. Only succeeded is a
// capture; processing (a delayed method on its way) and requires_capture (authorised) may
// still take the money, so they are unknown; requires_action (the buyer is
// authenticating), requires_payment_method and requires_confirmation are pending, and may
// be cancelled.
func view(pi *paymentIntent) (*orderly.GatewayPayment, error) {
	switch pi.Status {
	case "succeeded":
		amount, _, err := ToMinor(pi.AmountReceived, pi.Currency)
		if err != nil {
			return nil, err
		}
		return &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: pi.ID, Amount: amount}, nil
	case "canceled":
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	case "requires_payment_method", "requires_confirmation", "requires_action":
		return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
	}
	return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}, nil
}

// Query implements orderly.Gateway: the payment intent p.ProviderRef (intentOf),
// retrieved.
func (a *Adapter) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	id, err := a.intentOf(ctx, p)
	if err != nil {
		return nil, err
	}
	var pi paymentIntent
	if err := a.do(ctx, http.MethodGet, "/v1/payment_intents/"+url.PathEscape(id), nil, "", &pi); err != nil {
		return nil, err
	}
	return view(&pi)
}

// Cancel implements orderly.Gateway: the payment intent p.ProviderRef (intentOf)
// cancelled. Stripe's answer that the intent can no longer be cancelled
// (payment_intent_unexpected_state) carries the intent: succeeded → GatewaySucceeded (the
// payment is applied instead of the close), canceled → GatewayFailed, processing →
// GatewayUnknown. The call carries no Idempotency-Key: cancelling is idempotent at Stripe,
// and a replayed first answer ("processing") would hide what the intent became since.
func (a *Adapter) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	id, err := a.intentOf(ctx, p)
	if err != nil {
		return nil, err
	}
	var pi paymentIntent
	err = a.do(ctx, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(id)+"/cancel", nil, "", &pi)
	var ce *callError
	if errors.As(err, &ce) && ce.body.Error.PaymentIntent != nil {
		return view(ce.body.Error.PaymentIntent)
	} else if err != nil {
		return nil, err
	}
	return view(&pi)
}

// refundIntent returns the PaymentIntent a refund of r goes to: the one that captured the
// money (r.Payment.ChannelTxnID, a "pi_…" set at capture: a Checkout Session's own
// intent, or a second capture's), else the one stored at create (intentOf).
func (a *Adapter) refundIntent(ctx context.Context, r *orderly.GatewayRefund) (string, error) {
	if r.Payment == nil {
		return "", fmt.Errorf("stripe: refund %s: payment %s was not given; its payment intent is unknown", r.IdempotencyKey, r.PaymentID)
	}
	if strings.HasPrefix(r.Payment.ChannelTxnID, "pi_") {
		return r.Payment.ChannelTxnID, nil
	}
	return a.intentOf(ctx, r.Payment)
}

// refundView maps a Stripe refund to the gateway's view: succeeded is the only
// confirmation; pending and requires_action are accepted, not final (Detail the status);
// failed and canceled are final failures (Detail the status and failure_reason). A status
// Stripe may add later is read as not final.
func refundView(f *refund) *orderly.GatewayRefundResult {
	res := &orderly.GatewayRefundResult{Status: orderly.GatewayPending, ProviderRef: f.ID, Detail: f.Status}
	switch f.Status {
	case "succeeded":
		res.Status = orderly.GatewaySucceeded
	case "failed", "canceled":
		res.Status = orderly.GatewayFailed
		if f.FailureReason != "" {
			res.Detail += " (" + f.FailureReason + ")"
		}
	}
	return res
}

// Refund implements orderly.Gateway: a refund of r.Amount of the payment's intent
// (refundIntent) with metadata refund_id and payment_id, Idempotency-Key
// "orderly-refund-<r.IdempotencyKey>", so a redelivered outbox message never refunds twice
// within Stripe's idempotency window (and QueryRefund finds the refund by its metadata
// after it). The answer is refundView of the refund: Stripe answers pending for many
// methods. A 4xx answer (already refunded, amount too large) is an *orderly.Error: refused.
func (a *Adapter) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	id, err := a.refundIntent(ctx, r)
	if err != nil {
		return nil, err
	}
	params := url.Values{"payment_intent": {id},
		"metadata[" + MetadataRefundID + "]": {r.IdempotencyKey}, "metadata[" + MetadataPaymentID + "]": {r.PaymentID}}
	if r.Amount > 0 && r.Currency != "" {
		amount, _, err := FromMinor(r.Amount, r.Currency)
		if err != nil {
			return nil, orderly.Errorf(orderly.EINVALID, "stripe: %v", err)
		}
		params.Set("amount", strconv.FormatInt(amount, 10))
	}
	var f refund
	if err := a.do(ctx, http.MethodPost, "/v1/refunds", params, "orderly-refund-"+r.IdempotencyKey, &f); err != nil {
		return nil, refusal("refund", err)
	}
	return refundView(&f), nil
}

// QueryRefund implements orderly.Gateway: the refund r.ProviderRefundRef retrieved (GET
// /v1/refunds/{id}) when Stripe named it, else the refunds of the payment's intent listed
// (GET /v1/refunds?payment_intent=…, read-after-write, unlike search) and the one whose
// metadata refund_id is r.IdempotencyKey taken. Answers refundView of it. Errors: ENOTFOUND
// when the intent has no such refund (the caller then refunds); others are transient.
func (a *Adapter) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	if r.ProviderRefundRef != "" {
		var f refund
		if err := a.do(ctx, http.MethodGet, "/v1/refunds/"+url.PathEscape(r.ProviderRefundRef), nil, "", &f); err != nil {
			return nil, err
		}
		if got := f.Metadata[MetadataRefundID]; got != r.IdempotencyKey {
			return nil, fmt.Errorf("stripe: refund %s is orderly's refund %q, not %s", f.ID, got, r.IdempotencyKey)
		}
		return refundView(&f), nil
	}
	id, err := a.refundIntent(ctx, r)
	if err != nil {
		return nil, err
	}
	params := url.Values{"payment_intent": {id}, "limit": {"100"}}
	for {
		var page struct {
			Data    []refund `json:"data"`
			HasMore bool     `json:"has_more"`
		}
		if err := a.do(ctx, http.MethodGet, "/v1/refunds", params, "", &page); err != nil {
			return nil, err
		}
		for i := range page.Data {
			if page.Data[i].Metadata[MetadataRefundID] == r.IdempotencyKey {
				return refundView(&page.Data[i]), nil
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return nil, orderly.Errorf(orderly.ENOTFOUND, "stripe: payment intent %s has no refund with metadata refund_id %s", id, r.IdempotencyKey)
		}
		params.Set("starting_after", page.Data[len(page.Data)-1].ID)
	}
}
