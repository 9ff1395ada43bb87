package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	orderlyapi "github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
)

// TestImitateStripe: the imitation prints the serve flags and the client step, answers
// the calls the Stripe channel makes with them, and delivers a signed
// payment_intent.succeeded to orderly's webhook route after the client step; it stops
// when its context is done.
func TestImitateStripe(t *testing.T) {
	t.Parallel()
	events := make(chan []byte, 10)
	orderly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/channels/stripe/webhook" {
			a := stripe.New(stripe.Config{WebhookSecrets: []string{stripetest.WebhookSecret}})
			if _, err := a.Verify(r.Header, body, time.Now()); err == nil {
				events <- body
			}
		}
	}))
	defer orderly.Close()

	ctx, cancel := context.WithCancel(t.Context())
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- imitateStripe(ctx, &out, "127.0.0.1:0", orderly.URL+"/") }()
	flags := regexp.MustCompile(`--stripe-api-key (\S+) --stripe-webhook-secret (\S+) --stripe-api-url (\S+)`)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil; m = flags.FindStringSubmatch(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no serve flags printed: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m[1] != stripetest.APIKey || m[2] != stripetest.WebhookSecret || !strings.Contains(out.String(), "-u "+stripetest.PublishableKey+": -d client_secret=") {
		t.Fatalf("printed %q", out.String())
	}

	a := stripe.New(stripe.Config{APIKey: m[1], BaseURL: m[3]})
	att, err := a.Create(t.Context(), &orderlyapi.Payment{ID: "pay_1", OrderID: "ord_1", Amount: 1000, Currency: "USD", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"client_secret": {att.NextAction.ClientSecret}, "payment_method": {stripetest.PaymentMethodVisa}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, m[3]+"/v1/payment_intents/"+att.ProviderRef+"/confirm", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(stripetest.PublishableKey, "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&in)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || in.Status != "succeeded" {
		t.Fatalf("client step: %d %s", resp.StatusCode, in.Status)
	}
	select {
	case ev := <-events:
		if !bytes.Contains(ev, []byte(`"type":"payment_intent.succeeded"`)) || !bytes.Contains(ev, []byte(att.ProviderRef)) {
			t.Fatalf("webhook event %s", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook event")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
}
