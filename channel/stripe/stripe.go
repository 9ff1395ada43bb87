// Package stripe is the Stripe channel (package channel): webhook deliveries verified over
// the raw body with the Stripe-Signature header (HMAC-SHA256 with the endpoint's signing
// secret, several secrets during a roll, 5-minute tolerance) and decoded into
// provider-neutral notifications; and the outbound calls of orderly.Gateway on Stripe's
// REST API (payment intents and refunds), each with an Idempotency-Key per operation.
// It uses net/http only; Config.BaseURL points it at the imitation server of package
// stripetest in tests and simulations.
package stripe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// DefaultBaseURL is Stripe's API.
const DefaultBaseURL = "https://api.stripe.com"

// Config configures an Adapter. Zero values mean the documented defaults.
type Config struct {
	// Name is the channel's name as recorded on payments and in the webhook route
	// (/v1/channels/{name}/webhook); "stripe".
	Name string
	// APIKey is the secret API key (sk_live_…, sk_test_… or a restricted rk_… key with
	// write access to payment intents and refunds). Required for the outbound calls.
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
}

// Adapter is the Stripe channel. It is safe for concurrent use.
type Adapter struct {
	cfg Config
	// intents maps orderly payment ids to Stripe payment intent ids, filled by Create and
	// by verified events; a miss is resolved with the search API (another instance created
	// the intent, or this one restarted).
	intents sync.Map
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
	return &Adapter{cfg: cfg}
}

// Name implements channel.Adapter.
func (a *Adapter) Name() string { return a.cfg.Name }

// Verify implements channel.Adapter: the Stripe-Signature header over body as received
// (a body re-encoded by a proxy fails), then the event decoded (see the package's events
// in README.md "Payment channels"). Errors: EUNAUTHORIZED (signature, timestamp outside the
// tolerance, no secret configured), EINVALID (not a Stripe event, a malformed amount).
func (a *Adapter) Verify(header http.Header, body []byte, now time.Time) (*channel.Notification, error) {
	if err := verifySignature(header.Get(SignatureHeader), body, a.cfg.WebhookSecrets, now, a.cfg.Tolerance); err != nil {
		return nil, err
	}
	n, err := decode(a.cfg.Name, body)
	if err != nil {
		return nil, err
	}
	if n.PaymentID != "" && strings.HasPrefix(n.ChannelTxnID, "pi_") {
		a.intents.Store(n.PaymentID, n.ChannelTxnID)
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
	ID             string `json:"id"`
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	AmountReceived int64  `json:"amount_received"`
	Currency       string `json:"currency"`
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

// do calls the API: form-encoded params, Idempotency-Key when key is set, out decoded from
// a 2xx answer. A 4xx other than 409 and 429 is a *callError wrapped in an *orderly.Error
// (the provider refused: retrying will not help); anything else is transient.
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

// Create implements orderly.Gateway: a payment intent for p's amount with metadata
// payment_id and order_id, Idempotency-Key "orderly-create-<payment id>".
func (a *Adapter) Create(ctx context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	return &orderly.GatewayAttempt{}, a.create(ctx, p)
}

func (a *Adapter) create(ctx context.Context, p *orderly.Payment) error {
	amount, cur, err := FromMinor(p.Amount, p.Currency)
	if err != nil {
		return orderly.Errorf(orderly.EINVALID, "stripe: %v", err)
	}
	params := url.Values{
		"amount": {strconv.FormatInt(amount, 10)}, "currency": {cur},
		"metadata[" + MetadataPaymentID + "]": {p.ID}, "metadata[order_id]": {p.OrderID},
		"automatic_payment_methods[enabled]": {"true"},
	}
	var pi paymentIntent
	if err := a.do(ctx, http.MethodPost, "/v1/payment_intents", params, "orderly-create-"+p.ID, &pi); err != nil {
		return refusal("payment intent", err)
	}
	a.intents.Store(p.ID, pi.ID)
	return nil
}

// intentOf returns the payment intent id of orderly payment paymentID. Errors: none found
// (transient: the search index may lag a just-created intent).
func (a *Adapter) intentOf(ctx context.Context, paymentID string) (string, error) {
	if id, ok := a.intents.Load(paymentID); ok {
		return id.(string), nil
	}
	var res struct {
		Data []paymentIntent `json:"data"`
	}
	q := url.Values{"query": {"metadata['" + MetadataPaymentID + "']:'" + strings.ReplaceAll(paymentID, "'", `\'`) + "'"}}
	if err := a.do(ctx, http.MethodGet, "/v1/payment_intents/search", q, "", &res); err != nil {
		return "", err
	}
	if len(res.Data) == 0 {
		return "", fmt.Errorf("stripe: no payment intent has metadata payment_id %s (yet)", paymentID)
	}
	a.intents.Store(paymentID, res.Data[0].ID)
	return res.Data[0].ID, nil
}

// view maps a payment intent to the gateway's view of the attempt.
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
	// processing, requires_capture: money may be on its way.
	return &orderly.GatewayPayment{Status: orderly.GatewayUnknown}, nil
}

// Query implements orderly.Gateway: the payment intent, retrieved.
func (a *Adapter) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := p.ID
	id, err := a.intentOf(ctx, paymentID)
	if err != nil {
		return nil, err
	}
	var pi paymentIntent
	if err := a.do(ctx, http.MethodGet, "/v1/payment_intents/"+url.PathEscape(id), nil, "", &pi); err != nil {
		return nil, err
	}
	return view(&pi)
}

// Cancel implements orderly.Gateway: the payment intent cancelled, Idempotency-Key
// "orderly-cancel-<payment id>". Stripe's answer that the intent can no longer be cancelled
// (payment_intent_unexpected_state) carries the intent: succeeded → GatewaySucceeded (the
// payment is applied instead of the close), canceled → GatewayFailed, processing →
// GatewayUnknown.
func (a *Adapter) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	paymentID := p.ID
	id, err := a.intentOf(ctx, paymentID)
	if err != nil {
		return nil, err
	}
	var pi paymentIntent
	err = a.do(ctx, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(id)+"/cancel", nil, "orderly-cancel-"+paymentID, &pi)
	var ce *callError
	if errors.As(err, &ce) && ce.body.Error.PaymentIntent != nil {
		return view(ce.body.Error.PaymentIntent)
	} else if err != nil {
		return nil, err
	}
	return view(&pi)
}

// Refund implements orderly.Gateway: a refund of r.Amount of the payment's intent with
// metadata refund_id and payment_id, Idempotency-Key "orderly-refund-<r.IdempotencyKey>",
// so a redelivered outbox message never refunds twice. A 4xx answer (already refunded,
// amount too large) is an *orderly.Error: the refund failed.
func (a *Adapter) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	if err := a.refund(ctx, r); err != nil {
		return nil, err
	}
	return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
}

// QueryRefund implements orderly.Gateway.
func (a *Adapter) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return nil, orderly.Errorf(orderly.ENOTFOUND, "refund %s: not queried", r.IdempotencyKey)
}

func (a *Adapter) refund(ctx context.Context, r *orderly.GatewayRefund) error {
	id, err := a.intentOf(ctx, r.PaymentID)
	if err != nil {
		return err
	}
	params := url.Values{"payment_intent": {id},
		"metadata[" + MetadataRefundID + "]": {r.IdempotencyKey}, "metadata[" + MetadataPaymentID + "]": {r.PaymentID}}
	if r.Amount > 0 && r.Currency != "" {
		amount, _, err := FromMinor(r.Amount, r.Currency)
		if err != nil {
			return orderly.Errorf(orderly.EINVALID, "stripe: %v", err)
		}
		params.Set("amount", strconv.FormatInt(amount, 10))
	}
	var out struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := a.do(ctx, http.MethodPost, "/v1/refunds", params, "orderly-refund-"+r.IdempotencyKey, &out); err != nil {
		return refusal("refund", err)
	}
	if out.Status == "failed" || out.Status == "canceled" {
		return orderly.Errorf(orderly.EINVALID, "stripe refund %s is %s", out.ID, out.Status)
	}
	return nil
}
