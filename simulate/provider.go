package simulate

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
)

// Provider stands for a real payment provider (package channel) in a run: each outcome a
// buyer would report with orderly's own callback is played at the provider instead, and
// delivered as the provider's signed webhook (Config.Provider).
type Provider interface {
	// Webhook plays status (orderly.CallbackSucceeded, CallbackFailed or CallbackExpired)
	// of payment paymentID at the provider and returns the webhook request that reports
	// it: the path on the server and the body and headers, signed now. The same payment
	// and status give the same event again (its retries and duplicates keep their event
	// id).
	Webhook(paymentID, status string) (path string, body []byte, header http.Header, err error)
}

// ErrNoWebhook is returned by a Provider for an outcome its provider does not notify
// (WeChat Pay notifies successes only): nothing is delivered, and the outcome reaches the
// server by its own query or close.
var ErrNoWebhook = errors.New("the provider sends no webhook for this outcome")

// StripeProvider plays outcomes at an imitation of Stripe (package stripetest) whose
// intents the server's Stripe channel created, and delivers them to
// /v1/channels/stripe/webhook signed with stripetest.WebhookSecret.
type StripeProvider struct {
	Fake *stripetest.Server

	mu     sync.Mutex
	events map[string][]byte // "<payment id>/<status>" → the event
}

var _ Provider = (*StripeProvider)(nil)

// Webhook implements Provider. A success for an intent that the server's close cancelled
// is captured anyway (money that arrives late: the server must refund it).
func (p *StripeProvider) Webhook(paymentID, status string) (string, []byte, http.Header, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.events == nil {
		p.events = map[string][]byte{}
	}
	key := paymentID + "/" + status
	ev, ok := p.events[key]
	if !ok {
		switch status {
		case orderly.CallbackSucceeded:
			if ev, ok = p.Fake.Pay(paymentID); !ok {
				ev, ok = p.Fake.PayLate(paymentID)
			}
		default:
			ev, ok = p.Fake.Fail(paymentID)
		}
		if !ok {
			return "", nil, nil, fmt.Errorf("stripe imitation: payment %s cannot be %s there", paymentID, status)
		}
		p.events[key] = ev
	}
	h := http.Header{}
	h.Set(stripe.SignatureHeader, stripe.Sign(stripetest.WebhookSecret, time.Now(), ev))
	return "/v1/channels/stripe/webhook", ev, h, nil
}
