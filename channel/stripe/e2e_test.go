package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testenv"
	"github.com/orderlyhq/orderly/store"
)

// TestMain checks for leaked goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is one engine wired to one imitation Stripe, the Stripe channel its default.
type bundle struct {
	e    *engine.Engine
	fake *stripetest.Server
	sku  atomic.Int64
}

func setup(t *testing.T, edit func(*engine.Config, *stripetest.Server)) *bundle {
	t.Helper()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	t.Cleanup(func() {
		if n := fake.Calls("search"); n != 0 {
			t.Errorf("the search API was called %d times; money paths must use the stored ids", n)
		}
	})
	adapter := stripe.New(stripe.Config{APIKey: stripetest.APIKey, WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL})
	cfg := engine.Config{
		Addr: "127.0.0.1:0", DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Channels: []channel.Adapter{adapter}, DefaultChannel: "stripe", SweepInterval: 500 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg, fake)
	}
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections() // first: Close waits 5 s for an unused connection
		_ = e.Close(context.WithoutCancel(t.Context()))
	})
	fake.SetWebhook(e.URL() + "/v1/channels/stripe/webhook")
	return &bundle{e: e, fake: fake}
}

// order creates an order of 1 unit at price (minor units of currency) and starts its
// payment on the default channel.
func (b *bundle) order(t *testing.T, price int64, currency string, timeoutSeconds int64) (*orderly.Order, *orderly.Payment) {
	t.Helper()
	ctx := t.Context()
	sku := fmt.Sprintf("SKU-%d", b.sku.Add(1))
	if _, err := b.e.Orders().SetStock(ctx, sku, 10); err != nil {
		t.Fatal(err)
	}
	o, _, err := b.e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Currency: currency,
		Items: []orderly.Item{{SKU: sku, Quantity: 1, UnitPrice: price}}, PaymentTimeoutSeconds: timeoutSeconds})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	if p.Channel != "stripe" {
		t.Fatalf("payment channel %q, want stripe", p.Channel)
	}
	in, ok := b.fake.Intent(p.ID)
	if !ok || in.Amount != price || in.Metadata["payment_id"] != p.ID || in.Metadata["order_id"] != o.ID {
		t.Fatalf("intent at Stripe for payment %s: %+v (found %v); want amount %d with metadata payment_id and order_id", p.ID, in, ok, price)
	}
	if p.ProviderRef != in.ID || p.NextAction == nil || p.NextAction.ClientSecret != in.ClientSecret {
		t.Fatalf("payment %s: provider_ref %q next_action %+v; want %s and its client_secret", p.ID, p.ProviderRef, p.NextAction, in.ID)
	}
	return o, p
}

func (b *bundle) get(t *testing.T, id string) *orderly.Order {
	t.Helper()
	o, err := b.e.Orders().Order(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// events returns the recorded channel events of payment id.
func (b *bundle) events(t *testing.T, paymentID string) []*store.ChannelEvent {
	t.Helper()
	var out []*store.ChannelEvent
	if err := b.e.Store().Read(t.Context(), func(tx store.Tx) (err error) {
		out, err = tx.ChannelEventList(t.Context(), paymentID, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// pays counts the pay transitions in the order's audit trail.
func (b *bundle) pays(t *testing.T, id string) int {
	t.Helper()
	trail, err := b.e.Orders().OrderHistory(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range trail {
		if tr.Event == orderly.EventPay {
			n++
		}
	}
	return n
}

func send(t *testing.T, b *bundle, event []byte) int {
	t.Helper()
	status, err := b.fake.Send(t.Context(), event)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestWebhookAppliedOnce: a valid payment_intent.succeeded pays the order once; the same
// event delivered 5 times in parallel, and again later, changes nothing more.
func TestWebhookAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 80, "JPY", 0)
	ev, ok := b.fake.Pay(p.ID)
	if !ok {
		t.Fatal("the imitation could not capture the intent")
	}
	statuses, err := b.fake.Deliver(t.Context(), [][]byte{ev}, 5, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Errorf("delivery %d answered %d, want 200", i, s)
		}
	}
	if s := send(t, b, ev); s != http.StatusOK {
		t.Errorf("a later retry answered %d, want 200", s)
	}
	got := b.get(t, o.ID)
	if got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid || b.pays(t, o.ID) != 1 {
		t.Errorf("order %s %s with %d pay transitions; want paid/paid once", got.State, got.PayStatus, b.pays(t, o.ID))
	}
	pay, err := b.e.Payments().Payment(t.Context(), p.ID)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := b.fake.Intent(p.ID)
	if pay.State != orderly.PaymentSucceeded || pay.ChannelTxnID != in.ID || pay.Amount != 80 || pay.Currency != "JPY" {
		t.Errorf("payment %+v; want succeeded with channel_txn_id %s, 80 JPY", pay, in.ID)
	}
	if evs := b.events(t, p.ID); len(evs) != 1 || evs[0].Kind != string(channel.PaymentSucceeded) || evs[0].Channel != "stripe" {
		t.Errorf("recorded events %+v; want one payment_succeeded on stripe", evs)
	}
}

// TestWebhookOfAnotherVersion: an event of another api_version than the one orderly pins
// is applied where its shape is known and counted in
// orderly_channel_event_version_mismatches_total{channel,version}, once per delivery.
func TestWebhookOfAnotherVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 80, "JPY", 0)
	b.fake.EventVersion = "2024-06-20"
	ev, ok := b.fake.Pay(p.ID)
	if !ok {
		t.Fatal("the imitation could not capture the intent")
	}
	if s := send(t, b, ev); s != http.StatusOK {
		t.Fatalf("delivery answered %d, want 200", s)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePaid {
		t.Fatalf("order %s, want paid", got.State)
	}
	mismatches := b.e.Metrics().ChannelVersionMismatches
	if n := testutil.ToFloat64(mismatches.WithLabelValues("stripe", "2024-06-20")); n != 1 {
		t.Fatalf("version mismatches counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(mismatches.WithLabelValues("stripe", stripe.APIVersion)); n != 0 {
		t.Fatalf("the pinned version counted %v times, want 0", n)
	}
}

// TestWebhookReencodedAccepted: an event re-encoded (field order, whitespace) and signed
// over those raw bytes is accepted and applied.
func TestWebhookReencodedAccepted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 1000, "USD", 0)
	ev, _ := b.fake.Pay(p.ID)
	var m map[string]any
	if err := json.Unmarshal(ev, &m); err != nil {
		t.Fatal(err)
	}
	reencoded, err := json.MarshalIndent(m, "", "   ") // keys sorted, indented
	if err != nil {
		t.Fatal(err)
	}
	if string(reencoded) == string(ev) {
		t.Fatal("the re-encoding did not change the bytes")
	}
	if s := send(t, b, reencoded); s != http.StatusOK {
		t.Fatalf("re-encoded event answered %d, want 200", s)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePaid {
		t.Errorf("order %s, want paid", got.State)
	}
}

// TestWebhookRejected: a body with one byte changed after signing, or signed 6 minutes
// ago, is answered 400 and changes nothing; so is a payment orderly does not know, which
// is kept among the refusals.
func TestWebhookRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 1000, "USD", 0)
	ev, _ := b.fake.Pay(p.ID)
	post := func(body []byte, signedAt time.Time) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.e.URL()+"/v1/channels/stripe/webhook", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(stripe.SignatureHeader, stripe.Sign(stripetest.WebhookSecret, signedAt, ev))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	changed := append([]byte(nil), ev...)
	changed[len(changed)-2] ^= 0x20
	if s := post(changed, time.Now()); s != http.StatusBadRequest {
		t.Errorf("one byte changed: %d, want 400", s)
	}
	if s := post(ev, time.Now().Add(-6*time.Minute)); s != http.StatusBadRequest {
		t.Errorf("signed 6 minutes ago: %d, want 400", s)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying || got.Version != o.Version+1 {
		t.Errorf("order %s/%s version %d after refused deliveries; want pending_payment/paying version %d", got.State, got.PayStatus, got.Version, o.Version+1)
	}
	if evs := b.events(t, p.ID); len(evs) != 0 {
		t.Errorf("refused deliveries recorded %d events", len(evs))
	}
	// A payment orderly does not know: refused, kept.
	var m map[string]any
	_ = json.Unmarshal(ev, &m)
	obj := m["data"].(map[string]any)["object"].(map[string]any)
	obj["metadata"] = map[string]string{"payment_id": "pay_unknown"}
	m["id"] = "evt_unknown_payment"
	unknown, _ := json.Marshal(m)
	if s := send(t, b, unknown); s != http.StatusBadRequest {
		t.Errorf("unknown payment: %d, want 400", s)
	}
	rs, err := b.e.Payments().CallbackRefusals(t.Context(), "pay_unknown")
	if err != nil || len(rs) != 1 || rs[0].Reason != orderly.RefusalUnknownPayment {
		t.Errorf("refusals of pay_unknown: %+v, %v; want one unknown_payment", rs, err)
	}
}

// TestCheckoutAsync: checkout.session.completed with payment_status unpaid does not mark
// the order paid; the later async_payment_succeeded does.
func TestCheckoutAsync(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 2500, "EUR", 0)
	completed, succeeded, ok := b.fake.CheckoutAsync(p.ID)
	if !ok {
		t.Fatal("no intent")
	}
	if s := send(t, b, completed); s != http.StatusOK {
		t.Fatalf("checkout completed: %d", s)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
		t.Fatalf("after checkout completed (unpaid): %s/%s, want pending_payment/paying", got.State, got.PayStatus)
	}
	if s := send(t, b, succeeded); s != http.StatusOK {
		t.Fatalf("async payment succeeded: %d", s)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePaid || b.pays(t, o.ID) != 1 {
		t.Errorf("after async success: %s with %d pay transitions, want paid once", got.State, b.pays(t, o.ID))
	}
	// Delivered again, and out of order: nothing changes.
	if _, err := b.fake.Deliver(t.Context(), [][]byte{succeeded, completed}, 2, true, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.get(t, o.ID); got.State != orderly.StatePaid || b.pays(t, o.ID) != 1 {
		t.Errorf("after redelivery: %s with %d pay transitions, want paid once", got.State, b.pays(t, o.ID))
	}
}

// TestCloseAlreadyPaid: the payment deadline passes with the payment in flight; the close
// asks Stripe to cancel the intent, Stripe answers that it succeeded meanwhile: the order
// ends paid, not closed. The buyer's cancel meets the same answer.
func TestCloseAlreadyPaid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.fake.SetCancelMode(stripetest.CancelPaysFirst)
	o, p := b.order(t, 1000, "USD", 1)
	waitFor(t, "the order to leave pending_payment", func() bool { return b.get(t, o.ID).State != orderly.StatePendingPayment })
	got := b.get(t, o.ID)
	pay, _ := b.e.Payments().Payment(t.Context(), p.ID)
	in, _ := b.fake.Intent(p.ID)
	if got.State != orderly.StatePaid || got.ClosedAt != nil || pay.State != orderly.PaymentSucceeded || pay.ChannelTxnID != in.ID {
		t.Errorf("order %s (closed_at %v), payment %s %q; want paid, not closed, payment succeeded with %s", got.State, got.ClosedAt, pay.State, pay.ChannelTxnID, in.ID)
	}
	if b.fake.Calls("cancel") < 1 {
		t.Error("Stripe was not asked to cancel")
	}

	o2, _ := b.order(t, 1000, "USD", 0)
	_, err := b.e.Orders().CancelOrder(t.Context(), o2.ID, "buyer", "")
	if orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Errorf("buyer cancel: %v, want %s (paid before it could be cancelled)", err, orderly.EILLEGAL)
	}
	if got := b.get(t, o2.ID); got.State != orderly.StatePaid {
		t.Errorf("order after buyer cancel: %s, want paid", got.State)
	}
}

// TestCloseUnknownHolds: Stripe cannot answer the cancel (500): the order stays open under
// inspection until close_at + the inspection hold, then closes.
func TestCloseUnknownHolds(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	const hold = 3 * time.Second
	b := setup(t, func(c *engine.Config, _ *stripetest.Server) { c.InspectionHold = hold })
	b.fake.SetCancelMode(stripetest.CancelUnknown)
	o, _ := b.order(t, 1000, "USD", 1)
	waitFor(t, "a cancel asked of Stripe", func() bool { return b.fake.Calls("cancel") >= 1 })
	if got := b.get(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
		t.Fatalf("after an unknown answer: %s/%s, want pending_payment/paying (held)", got.State, got.PayStatus)
	}
	waitFor(t, "the close after the hold", func() bool { return b.get(t, o.ID).State == orderly.StateClosed })
	got := b.get(t, o.ID)
	if got.ClosedAt == nil || got.ClosedAt.Before(got.CloseAt.Add(hold)) {
		t.Errorf("closed at %v, want at or after close_at %v + hold %s", got.ClosedAt, got.CloseAt, hold)
	}
	if b.fake.Calls("cancel") < 2 {
		t.Errorf("Stripe was asked to cancel %d times during the hold, want at least 2 (inspection retries)", b.fake.Calls("cancel"))
	}
}

// TestCloseCancelled: the cancel succeeds at Stripe: the order closes at its deadline and
// the intent is canceled there, so the buyer can no longer pay it.
func TestCloseCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	o, p := b.order(t, 1000, "USD", 1)
	waitFor(t, "the close", func() bool { return b.get(t, o.ID).State == orderly.StateClosed })
	in, _ := b.fake.Intent(p.ID)
	pay, _ := b.e.Payments().Payment(t.Context(), p.ID)
	if in.Status != "canceled" || pay.State != orderly.PaymentFailed {
		t.Errorf("intent %s, payment %s; want canceled at Stripe and failed here", in.Status, pay.State)
	}
	if _, ok := b.fake.Pay(p.ID); ok {
		t.Error("the buyer could pay a cancelled intent")
	}
}

// TestRouting: two versions of the Stripe channel on a 90/10 split, the second an adapter
// named as variant v2 of channel stripe ("stripe@v2"): each attempt that names no channel
// goes where the router's sticky split puts its user and records channel stripe and that
// variant, its intent created through that version; the Orderly-Channel header picks one
// explicitly; the admin view shows each variant and the deviation between them.
func TestRouting(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *engine.Config, fake *stripetest.Server) {
		v2 := stripe.New(stripe.Config{Name: "stripe@v2", APIKey: stripetest.APIKey,
			WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL})
		c.Channels = append(c.Channels, v2)
		c.ChannelRoutes = []channel.Route{{Channel: "stripe", Weight: 90}, {Channel: "stripe@v2", Weight: 10}}
		c.DefaultChannel = ""
		c.AdminToken = "adm"
	})
	ctx := t.Context()
	if _, err := b.e.Orders().SetStock(ctx, "SKU-R", 1000); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i := range 60 {
		user := fmt.Sprintf("user-%d", i)
		o, _, err := b.e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: user, Currency: "USD",
			Items: []orderly.Item{{SKU: "SKU-R", Quantity: 1, UnitPrice: 500}}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		if want := b.e.Router().Pick(user); p.Route() != want || p.Channel != "stripe" || (p.Variant != "" && p.Variant != "v2") {
			t.Errorf("%s (bucket %d): payment on channel %q variant %q, want route %s", user, channel.Bucket(user), p.Channel, p.Variant, want)
		}
		if got, err := b.e.Payments().Payment(ctx, p.ID); err != nil || got.Variant != p.Variant {
			t.Errorf("payment %s read back: %+v, %v; want variant %q recorded", p.ID, got, err, p.Variant)
		}
		if _, ok := b.fake.Intent(p.ID); !ok {
			t.Errorf("payment %s on %s: no intent at Stripe", p.ID, p.Channel)
		}
		got[p.Route()]++
	}
	if got["stripe"] == 0 || got["stripe@v2"] == 0 {
		t.Errorf("payments per channel %v: want both versions used", got)
	}

	o, _, err := b.e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "user-0", Currency: "USD",
		Items: []orderly.Item{{SKU: "SKU-R", Quantity: 1, UnitPrice: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	other := map[string]string{"stripe": "stripe@v2", "stripe@v2": "stripe"}[b.e.Router().Pick("user-0")]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.e.URL()+"/v1/orders/"+o.ID+"/payments", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Orderly-Channel", other)
	req.Header.Set("Authorization", "Bearer adm") // an admin token guards every route
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Channel string `json:"channel"`
		Variant string `json:"variant"`
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || orderly.RouteName(p.Channel, p.Variant) != other {
		t.Errorf("start payment with Orderly-Channel %s: %d, channel %q variant %q (%v); want 201 on %s", other, resp.StatusCode, p.Channel, p.Variant, err, other)
	}

	// The admin view: both variants in rotation with their weights; one captured payment
	// on the first and one failed on the second (by webhook, the same endpoint for both)
	// make success rates 1 and 0 and the deviation between the variants of stripe 1.
	for _, c := range []string{"stripe", "stripe@v2"} {
		for i := range 60 {
			user := fmt.Sprintf("user-%d", i)
			if b.e.Router().Pick(user) != c {
				continue
			}
			o, _, _ := b.e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: user, Currency: "USD",
				Items: []orderly.Item{{SKU: "SKU-R", Quantity: 1, UnitPrice: 500}}})
			pay, err := b.e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
			if err != nil {
				t.Fatal(err)
			}
			outcome := b.fake.Pay
			if c == "stripe@v2" {
				outcome = b.fake.Fail
			}
			ev, _ := outcome(pay.ID)
			if s := send(t, b, ev); s != http.StatusOK {
				t.Fatalf("webhook for %s: %d", c, s)
			}
			break
		}
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, b.e.URL()+"/v1/admin/channels", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		Channels         []channel.Stat     `json:"channels"`
		Deviation        float64            `json:"deviation"`
		VariantDeviation map[string]float64 `json:"variant_deviation"`
	}
	err = json.NewDecoder(resp.Body).Decode(&view)
	_ = resp.Body.Close()
	want := []channel.Stat{{Route: "stripe", Channel: "stripe", Weight: 90, InRotation: true, Outcomes: 1, SuccessRate: 1},
		{Route: "stripe@v2", Channel: "stripe", Variant: "v2", Weight: 10, InRotation: true, Outcomes: 1, SuccessRate: 0}}
	if err != nil || resp.StatusCode != http.StatusOK || fmt.Sprint(view.Channels) != fmt.Sprint(want) || view.Deviation != 1 ||
		fmt.Sprint(view.VariantDeviation) != "map[stripe:1]" {
		t.Errorf("GET /v1/admin/channels: %d %+v (%v); want %+v, deviation 1, variant_deviation map[stripe:1]", resp.StatusCode, view, err, want)
	}
	captured := testutil.ToFloat64(b.e.Metrics().ChannelPayments.WithLabelValues("stripe", "", "captured"))
	failed := testutil.ToFloat64(b.e.Metrics().ChannelPayments.WithLabelValues("stripe", "v2", "failed"))
	if captured != 1 || failed != 1 {
		t.Errorf("orderly_channel_payments_total: stripe/\"\" captured %v, stripe/v2 failed %v; want 1 and 1", captured, failed)
	}
}

// TestRefundNotifications: refund events confirm or fail orderly's refund once. The engine
// is not started, so the outbox does not confirm the refunds first: the webhook does.
func TestRefundNotifications(t *testing.T) {
	t.Parallel()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	e, err := engine.Open(t.Context(), engine.Config{
		DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultChannel: "stripe",
		Channels: []channel.Adapter{stripe.New(stripe.Config{APIKey: stripetest.APIKey, BaseURL: fake.URL})},
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.WithoutCancel(t.Context())) })
	b := &bundle{e: e, fake: fake}
	ctx := t.Context()
	o, p := b.order(t, 1000, "USD", 0)
	res, err := e.Payments().HandleNotification(ctx, &channel.Notification{Channel: "stripe", EventID: "evt_paid",
		Kind: channel.PaymentSucceeded, PaymentID: p.ID, ChannelTxnID: "pi_x", Amount: 1000, Currency: "USD"})
	if err != nil || !res.Applied {
		t.Fatalf("payment notification: %+v, %v", res, err)
	}
	r1, _, err := e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 300})
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 200})
	if err != nil {
		t.Fatal(err)
	}
	refundEvent := func(id string, kind channel.Kind, refundID string, amount int64) *channel.Notification {
		return &channel.Notification{Channel: "stripe", EventID: id, Kind: kind, PaymentID: p.ID, RefundID: refundID, Amount: amount, Currency: "USD"}
	}
	for i, tc := range []struct {
		n       *channel.Notification
		applied bool
	}{
		{refundEvent("evt_r1", channel.RefundSucceeded, r1.ID, 300), true},
		{refundEvent("evt_r1", channel.RefundSucceeded, r1.ID, 300), false},        // the same event again
		{refundEvent("evt_r1_charge", channel.RefundSucceeded, r1.ID, 300), false}, // charge.refunded for the same refund
		{refundEvent("evt_r2", channel.RefundFailed, r2.ID, 200), true},
		{refundEvent("evt_r2_late", channel.RefundSucceeded, r2.ID, 200), false}, // a failed refund stays failed
		{refundEvent("evt_dashboard", channel.RefundSucceeded, "", 50), false},   // made at the dashboard
	} {
		res, err := e.Payments().HandleNotification(ctx, tc.n)
		if err != nil || res.Applied != tc.applied {
			t.Errorf("notification %d (%s %s): %+v, %v; want applied=%v", i, tc.n.EventID, tc.n.Kind, res, err, tc.applied)
		}
	}
	refunds, err := e.Orders().OrderRefunds(ctx, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]orderly.RefundState{}
	for _, f := range refunds {
		states[f.ID] = f.State
	}
	got := b.get(t, o.ID)
	if states[r1.ID] != orderly.RefundSucceeded || states[r2.ID] != orderly.RefundFailed || got.RefundedAmount != 300 ||
		got.PayStatus != orderly.PayPartiallyRefunded {
		t.Errorf("refunds %v, order refunded %d pay_status %s; want r1 succeeded, r2 failed, 300 refunded, partially_refunded",
			states, got.RefundedAmount, got.PayStatus)
	}
}
