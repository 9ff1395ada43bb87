package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// liveAdapter is a payment channel whose provider creates every attempt (answering an
// object id) and closes it when asked; it counts the closes (Cancel calls).
type liveAdapter struct {
	name    string
	created atomic.Int64
	cancels *atomic.Int64 // shared by the variants of one provider
}

func (a *liveAdapter) Name() string { return a.name }
func (a *liveAdapter) Create(_ context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	a.created.Add(1)
	return &orderly.GatewayAttempt{ProviderRef: "obj_" + p.ID}, nil
}
func (a *liveAdapter) Query(context.Context, *orderly.Payment) (*orderly.GatewayPayment, error) {
	return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
}
func (a *liveAdapter) Cancel(context.Context, *orderly.Payment) (*orderly.GatewayPayment, error) {
	a.cancels.Add(1)
	return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
}
func (a *liveAdapter) Refund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "pending"}, nil
}
func (a *liveAdapter) QueryRefund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "pending"}, nil
}
func (a *liveAdapter) Verify(http.Header, []byte, time.Time) (*channel.Notification, error) {
	return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "not used")
}
func (a *liveAdapter) Ack(http.ResponseWriter, error) {}

// startOver posts a payment attempt to the engine's own handler (body and Orderly-Channel
// header as given) and returns the status, the content type and the decoded body.
func startOver(t *testing.T, h http.Handler, orderID, body, header string) (int, string, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/orders/"+orderID+"/payments", strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if header != "" {
		req.Header.Set(httpapi.ChannelHeader, header)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("start payment: body %q: %v", rec.Body, err)
	}
	return rec.Code, rec.Header().Get("Content-Type"), v
}

// TestUnservedChannelRefused: a payment attempt naming a channel the server does not serve
// — unknown, misspelled, in another case, a variant not configured, or "sim" on a server
// with a real channel and without EnableSimChannel — in the body or in the Orderly-Channel
// header, is answered 422 invalid-input naming the served channels, and changes nothing:
// no attempt row, the order's pay_status and current attempt as they were, and the live
// attempt at the provider not closed (no Cancel call). A served variant then starts and
// closes the live attempt once.
func TestUnservedChannelRefused(t *testing.T) {
	t.Parallel()
	cancels := &atomic.Int64{}
	acme, acme2 := &liveAdapter{name: "acme", cancels: cancels}, &liveAdapter{name: "acme@v2", cancels: cancels}
	e := enginetest.New(t, enginetest.Options{Channels: []channel.Adapter{acme, acme2}, DefaultChannel: "acme", NoSimChannel: true})
	h := e.Engine.Handler()
	e.SetStock(t, "SKU-1", 3)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	code, _, live := startOver(t, h, o.ID, "", "")
	if code != http.StatusCreated || live["channel"] != "acme" || live["provider_ref"] != "obj_"+live["payment_id"].(string) {
		t.Fatalf("first attempt: %d %v, want 201 on acme with its provider_ref", code, live)
	}
	payments := func() int {
		var n int
		if err := e.Store.Read(t.Context(), func(tx store.Tx) error {
			ps, err := tx.PaymentList(t.Context(), o.ID)
			n = len(ps)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct{ body, header string }{
		{`{"channel":"paypal"}`, ""},
		{`{"channel":"acem"}`, ""},
		{`{"channel":"Acme"}`, ""},
		{`{"channel":"ACME"}`, ""},
		{`{"channel":"acme@v9"}`, ""},
		{`{"channel":"sim"}`, ""},
		{"", "Acme"},
		{"", "acme@v9"},
		{"", "sim"},
	} {
		code, ctype, v := startOver(t, h, o.ID, c.body, c.header)
		detail, _ := v["detail"].(string)
		if code != http.StatusUnprocessableEntity || ctype != httpapi.ProblemContentType ||
			v["type"] != httpapi.ProblemTypeBase+orderly.EINVALID || !strings.Contains(detail, "acme, acme@v2") {
			t.Errorf("channel body %s header %q: %d %s %v; want 422 %s invalid-input naming acme, acme@v2",
				c.body, c.header, code, ctype, v, httpapi.ProblemContentType)
		}
		if strings.Contains(detail, "sim") && c.body != `{"channel":"sim"}` && c.header != "sim" {
			t.Errorf("detail %q names sim, which this server does not serve", detail)
		}
	}
	got := e.OrderOf(t, o.ID)
	if n := payments(); n != 1 || got.PayStatus != orderly.PayPaying || got.CurrentPaymentID != live["payment_id"] {
		t.Fatalf("after the refusals: %d payments, pay_status %s, current %s; want 1, paying, %s", n, got.PayStatus, got.CurrentPaymentID, live["payment_id"])
	}
	if n := cancels.Load(); n != 0 {
		t.Fatalf("the live attempt was closed %d times at its provider by refused requests, want 0", n)
	}
	if n := acme.created.Load() + acme2.created.Load(); n != 1 {
		t.Fatalf("%d attempts created at the provider, want 1", n)
	}
	// A served variant replaces the live attempt: closed once at its provider.
	code, _, v := startOver(t, h, o.ID, "", "acme@v2")
	if code != http.StatusCreated || v["channel"] != "acme" || v["variant"] != "v2" || cancels.Load() != 1 || payments() != 2 {
		t.Fatalf("start on acme@v2: %d %v, %d cancels, %d payments; want 201 on acme v2, 1 cancel, 2 payments", code, v, cancels.Load(), payments())
	}
}

// TestUnservedChannelOnSim: on a server serving only the simulated channel, any other name
// ("Sim", "sim@v2", "stripe") is refused 422 naming sim, and nothing is written.
func TestUnservedChannelOnSim(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	h := e.Engine.Handler()
	e.SetStock(t, "SKU-1", 3)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	for _, ch := range []string{"Sim", "sim@v2", "stripe"} {
		code, _, v := startOver(t, h, o.ID, `{"channel":"`+ch+`"}`, "")
		if detail, _ := v["detail"].(string); code != http.StatusUnprocessableEntity || v["type"] != httpapi.ProblemTypeBase+orderly.EINVALID ||
			!strings.HasSuffix(detail, "the configured channels are sim") {
			t.Errorf("channel %q: %d %v; want 422 invalid-input naming sim", ch, code, v)
		}
	}
	if got := e.OrderOf(t, o.ID); got.PayStatus != orderly.PayUnpaid || got.CurrentPaymentID != "" {
		t.Fatalf("after the refusals: pay_status %s, current %q; want unpaid, none", got.PayStatus, got.CurrentPaymentID)
	}
	if code, _, v := startOver(t, h, o.ID, `{"channel":"sim"}`, ""); code != http.StatusCreated || v["channel"] != "sim" || v["attempt"] != 1.0 {
		t.Fatalf("start on sim: %d %v, want 201 attempt 1 on sim", code, v)
	}
}
