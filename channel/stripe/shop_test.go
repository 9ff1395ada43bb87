package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/store"
)

// doJSON makes req and decodes the answer into out (when not nil); it returns the status.
func doJSON(t *testing.T, req *http.Request, out any) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), stripetest.APIKey) {
		t.Fatalf("%s %s answered the secret API key: %s", req.Method, req.URL.Path, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", req.Method, req.URL.Path, resp.StatusCode, raw, err)
		}
	}
	return resp.StatusCode
}

// shop is a shop's backend talking to orderly over HTTP only.
type shop struct {
	t    *testing.T
	base string
}

func (s shop) call(method, path string, body, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.base+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return doJSON(s.t, req, out)
}

type stockJSON struct {
	Available int64 `json:"available"`
	Held      int64 `json:"held"`
	Sold      int64 `json:"sold"`
}

type orderJSON struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	PayStatus      string `json:"pay_status"`
	Amount         int64  `json:"amount"`
	RefundedAmount int64  `json:"refunded_amount"`
}

type paymentJSON struct {
	ID           string              `json:"payment_id"`
	State        string              `json:"state"`
	Channel      string              `json:"channel"`
	ChannelTxnID string              `json:"channel_txn_id"`
	ProviderRef  string              `json:"provider_ref"`
	NextAction   *orderly.NextAction `json:"next_action"`
}

type refundJSON struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	State          string `json:"state"`
	ProviderRef    string `json:"provider_ref"`
	ProviderStatus string `json:"provider_status"`
}

func (s shop) stock(sku string) stockJSON {
	s.t.Helper()
	var st stockJSON
	if c := s.call(http.MethodGet, "/v1/inventory/"+sku, nil, &st); c != http.StatusOK {
		s.t.Fatalf("GET stock: %d", c)
	}
	return st
}

func (s shop) order(id string) orderJSON {
	s.t.Helper()
	var o orderJSON
	if c := s.call(http.MethodGet, "/v1/orders/"+id, nil, &o); c != http.StatusOK {
		s.t.Fatalf("GET order: %d", c)
	}
	return o
}

func (s shop) refund(orderID, id string) refundJSON {
	s.t.Helper()
	var list struct {
		Refunds []refundJSON `json:"refunds"`
	}
	if c := s.call(http.MethodGet, "/v1/orders/"+orderID+"/refunds", nil, &list); c != http.StatusOK {
		s.t.Fatalf("GET refunds: %d", c)
	}
	i := slices.IndexFunc(list.Refunds, func(f refundJSON) bool { return f.ID == id })
	if i < 0 {
		s.t.Fatalf("no refund %s in %+v", id, list.Refunds)
	}
	return list.Refunds[i]
}

// requestRefund asks for a refund of amount restocking units of sku and waits until
// Stripe answered it pending: the refund reads requested with provider_status pending.
func (s shop) requestRefund(orderID, sku string, amount, units int64) refundJSON {
	s.t.Helper()
	var f refundJSON
	body := map[string]any{"amount": amount, "items": []map[string]any{{"sku": sku, "quantity": units}}, "restock": true}
	if c := s.call(http.MethodPost, "/v1/orders/"+orderID+"/refunds", body, &f); c != http.StatusCreated || f.State != "requested" {
		s.t.Fatalf("POST refund: %d %+v", c, f)
	}
	waitFor(s.t, "the refund answered pending", func() bool { return s.refund(orderID, f.ID).ProviderStatus == "pending" })
	f = s.refund(orderID, f.ID)
	if f.State != "requested" || !strings.HasPrefix(f.ProviderRef, "re_") || f.Amount != amount {
		s.t.Fatalf("refund answered pending: %+v; want requested with a re_ id, amount %d", f, amount)
	}
	return f
}

func (s shop) wantOrder(id, state, payStatus string, refunded int64) {
	s.t.Helper()
	if o := s.order(id); o.State != state || o.PayStatus != payStatus || o.RefundedAmount != refunded {
		s.t.Fatalf("order %+v; want %s/%s refunded_amount %d", o, state, payStatus, refunded)
	}
}

func (s shop) wantStock(sku string, want stockJSON) {
	s.t.Helper()
	if got := s.stock(sku); got != want {
		s.t.Fatalf("stock of %s %+v, want %+v", sku, got, want)
	}
}

// TestShopOverHTTP drives a shop's whole path over HTTP: stock, an order, a Stripe
// payment whose handoff the buyer's client confirms at Stripe with nothing but the
// publishable key and the client_secret, the webhook that makes the order paid; then
// refunds Stripe answers pending: one confirmed late by its webhook, one failed (its amount
// refundable again), one confirmed by the relay asking Stripe (no webhook). Stock and
// amounts move only when Stripe confirms.
func TestShopOverHTTP(t *testing.T) {
	t.Parallel()
	// A refund Stripe still answers pending is asked again soon.
	b := setup(t, func(cfg *engine.Config, _ *stripetest.Server) { cfg.OutboxMinBackoff = 50 * time.Millisecond })
	s := shop{t: t, base: b.e.URL()}
	const sku = "SKU-SHOP"
	if c := s.call(http.MethodPut, "/v1/inventory/"+sku, map[string]any{"available": 10}, nil); c != http.StatusOK {
		t.Fatalf("PUT stock: %d", c)
	}
	var o orderJSON
	if c := s.call(http.MethodPost, "/v1/orders", map[string]any{"user_id": "buyer-1", "currency": "USD",
		"items": []map[string]any{{"sku": sku, "quantity": 3, "unit_price": 1000}}}, &o); c != http.StatusCreated || o.Amount != 3000 {
		t.Fatalf("POST order: %d %+v", c, o)
	}
	s.wantStock(sku, stockJSON{Available: 7, Held: 3})

	var p paymentJSON
	if c := s.call(http.MethodPost, "/v1/orders/"+o.ID+"/payments", map[string]any{"channel": "stripe"}, &p); c != http.StatusCreated {
		t.Fatalf("POST payment: %d %+v", c, p)
	}
	if p.Channel != "stripe" || !strings.HasPrefix(p.ProviderRef, "pi_") || p.NextAction == nil || p.NextAction.Type != "use_stripe_sdk" ||
		!strings.HasPrefix(p.NextAction.ClientSecret, p.ProviderRef+"_secret_") {
		t.Fatalf("payment %+v (next action %+v); want a use_stripe_sdk handoff of a pi_", p, p.NextAction)
	}
	var got paymentJSON
	if c := s.call(http.MethodGet, "/v1/payments/"+p.ID, nil, &got); c != http.StatusOK || got.ProviderRef != p.ProviderRef ||
		got.NextAction == nil || got.NextAction.ClientSecret != p.NextAction.ClientSecret {
		t.Fatalf("GET payment: %d %+v; want the same provider_ref and client_secret", c, got)
	}

	// The buyer's client, with the handoff only. A wrong client_secret is refused.
	if c, _ := confirm(t, b.fake, p.ProviderRef, p.NextAction.ClientSecret+"x", stripetest.PaymentMethodVisa); c != http.StatusBadRequest {
		t.Fatalf("confirm with a wrong client_secret: %d, want 400", c)
	}
	if c, st := confirm(t, b.fake, got.ProviderRef, got.NextAction.ClientSecret, stripetest.PaymentMethodVisa); c != http.StatusOK || st != "succeeded" {
		t.Fatalf("confirm: %d %s", c, st)
	}
	waitFor(t, "the order paid by the webhook", func() bool { return s.order(o.ID).State == "paid" })
	s.wantOrder(o.ID, "paid", "paid", 0)
	s.wantStock(sku, stockJSON{Available: 7, Sold: 3})
	if c := s.call(http.MethodGet, "/v1/payments/"+p.ID, nil, &got); c != http.StatusOK || got.State != "succeeded" || got.ChannelTxnID != p.ProviderRef {
		t.Fatalf("payment after the webhook: %+v", got)
	}
	if d := b.fake.Deliveries(); !slices.Contains(d, stripetest.Delivery{Type: "payment_intent.succeeded", EventID: d[0].EventID, Status: http.StatusOK}) {
		t.Fatalf("deliveries %+v; want payment_intent.succeeded answered 200", d)
	}

	// A partial refund Stripe answers pending, confirmed late by its webhook.
	b.fake.SetRefundStatus("pending")
	f1 := s.requestRefund(o.ID, sku, 1000, 1)
	s.wantOrder(o.ID, "paid", "paid", 1000) // requested, not refunded
	s.wantStock(sku, stockJSON{Available: 7, Sold: 3})
	if _, ok := b.fake.SettleRefund(f1.ProviderRef, "succeeded", ""); !ok {
		t.Fatal("settle")
	}
	waitFor(t, "the refund confirmed", func() bool { return s.refund(o.ID, f1.ID).State == "succeeded" })
	s.wantOrder(o.ID, "paid", "partially_refunded", 1000)
	s.wantStock(sku, stockJSON{Available: 8, Sold: 2})

	// Pending, then failed: nothing moves, and its amount is refundable again.
	f2 := s.requestRefund(o.ID, sku, 1000, 1)
	s.wantOrder(o.ID, "paid", "partially_refunded", 2000)
	if _, ok := b.fake.SettleRefund(f2.ProviderRef, "failed", "lost_or_stolen_card"); !ok {
		t.Fatal("settle")
	}
	waitFor(t, "the refund failed", func() bool { return s.refund(o.ID, f2.ID).State == "failed" })
	s.wantOrder(o.ID, "paid", "partially_refunded", 1000)
	s.wantStock(sku, stockJSON{Available: 8, Sold: 2})

	// Pending, then succeeded, with no webhook: the relay asks Stripe again and confirms it.
	f3 := s.requestRefund(o.ID, sku, 2000, 2)
	s.wantOrder(o.ID, "refunding", "partially_refunded", 3000)
	s.wantStock(sku, stockJSON{Available: 8, Sold: 2})
	b.fake.SetWebhook("")
	queries := b.fake.Calls("refund_retrieve")
	if _, ok := b.fake.SettleRefund(f3.ProviderRef, "succeeded", ""); !ok {
		t.Fatal("settle")
	}
	waitFor(t, "the refund confirmed by the relay", func() bool { return s.refund(o.ID, f3.ID).State == "succeeded" })
	if b.fake.Calls("refund_retrieve") <= queries {
		t.Error("the refund was confirmed without asking Stripe")
	}
	s.wantOrder(o.ID, "refunded", "refunded", 3000)
	s.wantStock(sku, stockJSON{Available: 10})
	if fs := b.fake.Refunds(p.ID); len(fs) != 3 || fs[0].Status != "succeeded" || fs[1].Status != "failed" || fs[2].Status != "succeeded" {
		t.Fatalf("refunds at Stripe %+v; want succeeded, failed, succeeded", fs)
	}
}

// TestRestartUsesStoredIntent: after a restart (a new adapter and engine on the same
// database, nothing in memory), a buyer's cancel and a refund name the PaymentIntent by the
// id stored at create; the search API is never called (setup fails the test if it is).
func TestRestartUsesStoredIntent(t *testing.T) {
	t.Parallel()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	dbPath := sqlitetest.Path(t)
	open := func() *engine.Engine {
		e, err := engine.Open(t.Context(), engine.Config{Addr: "127.0.0.1:0", DatabaseURL: dbPath, CallbackSecret: []byte("s"),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultChannel: "stripe", SweepInterval: 500 * time.Millisecond,
			Channels: []channel.Adapter{stripe.New(stripe.Config{APIKey: stripetest.APIKey,
				WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL})}}, features.All()...)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		fake.SetWebhook(e.URL() + "/v1/channels/stripe/webhook")
		return e
	}
	ctx := t.Context()
	e := open()
	b := &bundle{e: e, fake: fake}
	unpaid, up := b.order(t, 700, "USD", 0)
	paid, pp := b.order(t, 1200, "USD", 0)
	if c, _ := confirm(t, fake, pp.ProviderRef, pp.NextAction.ClientSecret, stripetest.PaymentMethodVisa); c != http.StatusOK {
		t.Fatalf("confirm: %d", c)
	}
	waitFor(t, "paid", func() bool { return b.get(t, paid.ID).State == orderly.StatePaid })
	// A message the first engine's relay holds at its close would wait for its lease to end
	// after the restart, and the order's later messages behind it.
	waitFor(t, "the outbox drained", func() bool {
		var n int
		if err := e.Store().Read(ctx, func(tx store.Tx) error {
			msgs, err := tx.OutboxList(ctx, orderly.MessagePending, 100)
			n = len(msgs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if err := e.Close(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}

	e = open()
	t.Cleanup(func() { http.DefaultClient.CloseIdleConnections(); _ = e.Close(context.WithoutCancel(t.Context())) })
	b.e = e
	if _, err := e.Orders().CancelOrder(ctx, unpaid.ID, "buyer", ""); err != nil {
		t.Fatalf("cancel after the restart: %v", err)
	}
	if in, _ := fake.Intent(up.ID); in.Status != "canceled" || in.ID != up.ProviderRef {
		t.Fatalf("intent %s %s, want %s canceled", in.ID, in.Status, up.ProviderRef)
	}
	if got := b.get(t, unpaid.ID); got.State != orderly.StateClosed {
		t.Fatalf("order %s, want closed", got.State)
	}
	f, _, err := e.Orders().CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: paid.ID, Amount: 1200})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refunded", func() bool { return b.get(t, paid.ID).State == orderly.StateRefunded })
	if fs := fake.Refunds(pp.ID); len(fs) != 1 || fs[0].Amount != 1200 || fs[0].PaymentIntent != pp.ProviderRef || fs[0].Metadata["refund_id"] != f.ID {
		t.Fatalf("refunds at Stripe %+v; want one of 1200 on %s for %s", fs, pp.ProviderRef, f.ID)
	}
	if n := fake.Calls("search"); n != 0 {
		t.Fatalf("the search API was called %d times", n)
	}
	if n := fake.Calls("create"); n != 2 {
		t.Fatalf("%d creates, want 2 (no repeat: the ids were stored)", n)
	}
}
