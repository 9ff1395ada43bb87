package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
)

// imitateStripe serves the imitation of Stripe's API (package stripetest) on addr (e.g.
// "127.0.0.1:12111"; port 0 picks one) until ctx is done, delivering its signed webhook
// events to orderlyURL + "/v1/channels/stripe/webhook". It first prints to w the `orderly
// serve` flags that point a server at it and the curl lines of the buyer's client step
// and of the imitation's controls. Errors: the listener's (the address is taken).
func imitateStripe(ctx context.Context, w io.Writer, addr, orderlyURL string) error {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("imitate stripe: %w", err)
	}
	srv := stripetest.NewServerOn(ln)
	defer srv.Close()
	webhook := strings.TrimRight(orderlyURL, "/") + "/v1/channels/stripe/webhook"
	srv.SetWebhook(webhook)
	u := srv.URL
	_, err = fmt.Fprintf(w, `Stripe imitation on %[1]s (API version %[2]s); its webhook events go to %[3]s
Run orderly against it:
  orderly serve --stripe-api-key %[4]s --stripe-webhook-secret %[5]s --stripe-api-url %[1]s --default-channel stripe
Start a payment (POST /v1/orders/{id}/payments {"channel":"stripe"}), then pay it as the buyer's client
(Stripe.js) does, with the answer's provider_ref and next_action.client_secret and the publishable key:
  curl -s %[1]s/v1/payment_intents/<provider_ref>/confirm -u %[6]s: -d client_secret=<client_secret> -d payment_method=%[7]s
Other outcomes: payment_method=%[8]s (3D Secure; then POST /_imitation/payment_intents/<id>/authenticate),
%[9]s (processing; then POST /_imitation/payment_intents/<id>/settle -d outcome=succeeded|failed), %[10]s.
Refunds answered pending, settled later (imitation controls, secret key):
  curl -s %[1]s/_imitation/refund_status -u %[4]s: -d status=pending
  curl -s %[1]s/_imitation/refunds/<re_id>/settle -u %[4]s: -d status=succeeded   # or failed
`, u, stripe.APIVersion, webhook, stripetest.APIKey, stripetest.WebhookSecret, stripetest.PublishableKey,
		stripetest.PaymentMethodVisa, stripetest.PaymentMethodAuthRequired, stripetest.PaymentMethodDelayed, stripetest.PaymentMethodDeclined)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
