package stripe_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
)

func newAdapter(t *testing.T) (*stripe.Adapter, *stripetest.Server) {
	t.Helper()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	t.Cleanup(func() {
		if n := fake.Calls("search"); n != 0 {
			t.Errorf("the search API was called %d times; money paths must use the stored ids", n)
		}
		for v, n := range fake.Versions() {
			if v != stripe.APIVersion {
				t.Errorf("%d calls with Stripe-Version %q, want every call pinned to %s", n, v, stripe.APIVersion)
			}
		}
	})
	return stripe.New(stripe.Config{APIKey: stripetest.APIKey, WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL}), fake
}

// confirm is the buyer's client step as Stripe.js makes it: the publishable key and the
// intent's client_secret, nothing else. It returns the HTTP status and the intent's status.
func confirm(t *testing.T, fake *stripetest.Server, intentID, secret, method string) (int, string) {
	t.Helper()
	form := url.Values{"client_secret": {secret}, "payment_method": {method}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fake.URL+"/v1/payment_intents/"+intentID+"/confirm", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(stripetest.PublishableKey, "")
	var in struct {
		Status string `json:"status"`
		Error  struct {
			PaymentIntent struct {
				Status string `json:"status"`
			} `json:"payment_intent"`
		} `json:"error"`
	}
	status := doJSON(t, req, &in)
	return status, in.Status + in.Error.PaymentIntent.Status
}

// TestCreateHandoff: Create answers the intent's id and its client_secret as a
// use_stripe_sdk handoff, and nothing of the secret key.
func TestCreateHandoff(t *testing.T) {
	t.Parallel()
	a, fake := newAdapter(t)
	p := &orderly.Payment{ID: "pay_h", OrderID: "ord_h", Amount: 1999, Currency: "USD", CreatedAt: time.Now()}
	att, err := a.Create(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := fake.Intent(p.ID)
	if att.ProviderRef != in.ID || !strings.HasPrefix(in.ID, "pi_") || att.NextAction == nil ||
		att.NextAction.Type != orderly.NextActionStripeSDK || att.NextAction.ClientSecret != in.ClientSecret ||
		!strings.HasPrefix(in.ClientSecret, in.ID+"_secret_") || in.Amount != 1999 || in.Currency != "usd" {
		t.Fatalf("attempt %+v (next action %+v), intent %+v; want the intent's id and client_secret", att, att.NextAction, in)
	}
	if strings.Contains(att.NextAction.ClientSecret, stripetest.APIKey) {
		t.Fatal("the handoff carries the secret key")
	}
}

// TestRecoverIntent: an attempt whose create was never answered (ProviderRef "") is
// queried and cancelled by the intent Stripe answers when the create is repeated with its
// Idempotency-Key: no second intent, no search. A repeat with other parameters, or beyond
// the idempotency window, is a transient error, never "no payment".
func TestRecoverIntent(t *testing.T) {
	t.Parallel()
	a, fake := newAdapter(t)
	ctx := t.Context()
	p := &orderly.Payment{ID: "pay_lost", OrderID: "ord_lost", Amount: 1000, Currency: "USD", CreatedAt: time.Now()}
	att, err := a.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	lost := *p // the store write after the create never happened
	gp, err := a.Query(ctx, &lost)
	if err != nil || gp.Status != orderly.GatewayPending {
		t.Fatalf("query without the stored id: %+v, %v; want pending", gp, err)
	}
	if s, st := confirm(t, fake, att.ProviderRef, att.NextAction.ClientSecret, stripetest.PaymentMethodVisa); s != http.StatusOK || st != "succeeded" {
		t.Fatalf("client step: %d %s", s, st)
	}
	gp, err = a.Query(ctx, &lost)
	if err != nil || gp.Status != orderly.GatewaySucceeded || gp.ChannelTxnID != att.ProviderRef || gp.Amount != 1000 {
		t.Fatalf("query after the payment: %+v, %v; want succeeded on %s for 1000", gp, err, att.ProviderRef)
	}
	if n := fake.Calls("create"); n != 3 {
		t.Errorf("%d create calls, want 3 (the create and two repeats)", n)
	}

	other := lost
	other.Amount = 2000 // not what the first create sent: Stripe refuses the repeat
	var refused *orderly.Error
	if gp, err := a.Query(ctx, &other); err == nil || errors.As(err, &refused) {
		t.Errorf("query with a mismatched repeat: %+v, %v; want a transient error", gp, err)
	}
	old := orderly.Payment{ID: "pay_old", OrderID: "ord_old", Amount: 1000, Currency: "USD", CreatedAt: time.Now().Add(-25 * time.Hour)}
	before := fake.Calls("create")
	if gp, err := a.Cancel(ctx, &old); err == nil || errors.As(err, &refused) || fake.Calls("create") != before {
		t.Errorf("cancel beyond the idempotency window: %+v, %v, %d creates; want a transient error and no create", gp, err, fake.Calls("create")-before)
	}

	q := &orderly.Payment{ID: "pay_lost2", OrderID: "ord_lost2", Amount: 500, Currency: "EUR", CreatedAt: time.Now()}
	if _, err := a.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	lost2 := *q
	gp, err = a.Cancel(ctx, &lost2)
	in, _ := fake.Intent(q.ID)
	if err != nil || gp.Status != orderly.GatewayFailed || in.Status != "canceled" {
		t.Errorf("cancel without the stored id: %+v, %v, intent %s; want failed and canceled", gp, err, in.Status)
	}
}

// TestRefundStates: refunds answered pending stay pending (Refund and QueryRefund) until
// Stripe settles them; QueryRefund finds a refund by its id or in the intent's list, and
// answers ENOTFOUND for one never made; a failed refund gives its amount back.
func TestRefundStates(t *testing.T) {
	t.Parallel()
	a, fake := newAdapter(t)
	ctx := t.Context()
	p := &orderly.Payment{ID: "pay_rf", OrderID: "ord_rf", Amount: 1000, Currency: "USD", CreatedAt: time.Now()}
	att, err := a.Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := confirm(t, fake, att.ProviderRef, att.NextAction.ClientSecret, stripetest.PaymentMethodVisa); s != http.StatusOK {
		t.Fatalf("client step: %d", s)
	}
	paid := *p
	paid.ProviderRef, paid.ChannelTxnID, paid.State = att.ProviderRef, att.ProviderRef, orderly.PaymentSucceeded
	r1 := &orderly.GatewayRefund{IdempotencyKey: "rf_1", PaymentID: p.ID, Amount: 300, Currency: "USD", Payment: &paid}
	if res, err := a.QueryRefund(ctx, r1); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("query of a refund never made: %+v, %v; want %s", res, err, orderly.ENOTFOUND)
	}
	fake.SetRefundStatus("pending")
	want := func(what string, res *orderly.GatewayRefundResult, err error, status orderly.GatewayStatus, detail string) {
		t.Helper()
		if err != nil || res.Status != status || res.Detail != detail || !strings.HasPrefix(res.ProviderRef, "re_") {
			t.Fatalf("%s: %+v, %v; want %s (%s) with a re_ id", what, res, err, status, detail)
		}
	}
	res, err := a.Refund(ctx, r1)
	want("refund", res, err, orderly.GatewayPending, "pending")
	res, err = a.Refund(ctx, r1) // a redelivery: the same refund, not a second one
	want("refund again", res, err, orderly.GatewayPending, "pending")
	if fs := fake.Refunds(p.ID); len(fs) != 1 || fs[0].Amount != 300 || fs[0].Metadata["refund_id"] != "rf_1" {
		t.Fatalf("refunds at Stripe %+v, want one of 300 with refund_id rf_1", fs)
	}
	res, err = a.QueryRefund(ctx, r1)
	want("query by list", res, err, orderly.GatewayPending, "pending")
	byID := *r1
	byID.ProviderRefundRef = res.ProviderRef
	res, err = a.QueryRefund(ctx, &byID)
	want("query by id", res, err, orderly.GatewayPending, "pending")
	if _, ok := fake.SettleRefund(res.ProviderRef, "failed", ""); !ok {
		t.Fatal("settle")
	}
	res, err = a.QueryRefund(ctx, &byID)
	want("query after the failure", res, err, orderly.GatewayFailed, "failed (declined)")

	r2 := &orderly.GatewayRefund{IdempotencyKey: "rf_2", PaymentID: p.ID, Amount: 1000, Currency: "USD", Payment: &paid}
	res, err = a.Refund(ctx, r2) // the whole amount: the failed refund gave its 300 back
	want("refund of the whole amount", res, err, orderly.GatewayPending, "pending")
	fake.SettleRefund(res.ProviderRef, "succeeded", "")
	res, err = a.QueryRefund(ctx, r2)
	want("query after success", res, err, orderly.GatewaySucceeded, "succeeded")
	r3 := &orderly.GatewayRefund{IdempotencyKey: "rf_3", PaymentID: p.ID, Amount: 1, Currency: "USD", Payment: &paid}
	if res, err := a.Refund(ctx, r3); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("refund beyond the captured amount: %+v, %v; want refused (%s)", res, err, orderly.EINVALID)
	}
	if n := fake.Calls("refund_list") + fake.Calls("refund_retrieve"); n != 5 {
		t.Errorf("%d refund queries, want 5", n)
	}
}

// TestVersionMismatch: an event rendered with another API version is decoded and marked
// with its version (Notification.UnexpectedVersion; the payment service counts it).
func TestVersionMismatch(t *testing.T) {
	t.Parallel()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	a := stripe.New(stripe.Config{APIKey: stripetest.APIKey, WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL})
	p := &orderly.Payment{ID: "pay_v", OrderID: "ord_v", Amount: 80, Currency: "JPY", CreatedAt: time.Now()}
	if _, err := a.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	verify := func(ev []byte) *channel.Notification {
		t.Helper()
		h := http.Header{}
		h.Set(stripe.SignatureHeader, stripe.Sign(stripetest.WebhookSecret, time.Now(), ev))
		n, err := a.Verify(h, ev, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ev, _ := fake.Pay(p.ID)
	if n := verify(ev); n.Kind != channel.PaymentSucceeded || n.UnexpectedVersion != "" {
		t.Fatalf("event of the pinned version: %s, unexpected version %q", n.Kind, n.UnexpectedVersion)
	}
	fake.EventVersion = "2024-06-20"
	ev, _ = fake.Pay(p.ID)
	if n := verify(ev); n.Kind != channel.PaymentSucceeded || n.Amount != 80 || n.UnexpectedVersion != "2024-06-20" {
		t.Fatalf("event of 2024-06-20: %s %d, unexpected version %q; want decoded and marked", n.Kind, n.Amount, n.UnexpectedVersion)
	}
}

// TestNonFinalIntents: processing and requires_action are never a payment. Asked, a
// processing intent is unknown (it cannot be cancelled) and one requiring an action is
// pending; the order stays unpaid through their webhooks until Stripe settles them.
func TestNonFinalIntents(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	a := stripe.New(stripe.Config{APIKey: stripetest.APIKey, BaseURL: b.fake.URL})
	delayed, dp := b.order(t, 1500, "USD", 0)
	if c, st := confirm(t, b.fake, dp.ProviderRef, dp.NextAction.ClientSecret, stripetest.PaymentMethodDelayed); c != http.StatusOK || st != "processing" {
		t.Fatalf("confirm with a bank debit: %d %s", c, st)
	}
	auth, ap := b.order(t, 900, "USD", 0)
	if c, st := confirm(t, b.fake, ap.ProviderRef, ap.NextAction.ClientSecret, stripetest.PaymentMethodAuthRequired); c != http.StatusOK || st != "requires_action" {
		t.Fatalf("confirm with 3D Secure: %d %s", c, st)
	}
	waitFor(t, "the processing and requires_action events", func() bool {
		n := 0
		for _, d := range b.fake.Deliveries() {
			if (d.Type == "payment_intent.processing" || d.Type == "payment_intent.requires_action") && d.Status == http.StatusOK {
				n++
			}
		}
		return n == 2
	})
	for _, tc := range []struct {
		p    *orderly.Payment
		want orderly.GatewayStatus
	}{{dp, orderly.GatewayUnknown}, {ap, orderly.GatewayPending}} {
		if gp, err := a.Query(ctx, tc.p); err != nil || gp.Status != tc.want {
			t.Errorf("query of %s: %+v, %v; want %s", tc.p.ProviderRef, gp, err, tc.want)
		}
	}
	if gp, err := a.Cancel(ctx, dp); err != nil || gp.Status != orderly.GatewayUnknown {
		t.Errorf("cancel of a processing intent: %+v, %v; want unknown", gp, err)
	}
	for _, id := range []string{delayed.ID, auth.ID} {
		if got := b.get(t, id); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
			t.Fatalf("order %s %s/%s, want pending_payment/paying", id, got.State, got.PayStatus)
		}
	}
	if !b.fake.SettleIntent(dp.ProviderRef, true) || !b.fake.Authenticate(ap.ProviderRef, true) {
		t.Fatal("settle")
	}
	for _, id := range []string{delayed.ID, auth.ID} {
		waitFor(t, "paid", func() bool { return b.get(t, id).State == orderly.StatePaid })
	}
	if got := b.get(t, delayed.ID); got.PayStatus != orderly.PayPaid || b.pays(t, delayed.ID) != 1 {
		t.Errorf("order %s/%s with %d pay transitions; want paid once", got.State, got.PayStatus, b.pays(t, delayed.ID))
	}
}
