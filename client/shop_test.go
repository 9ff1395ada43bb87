package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/client"
)

const (
	adminToken     = "toy-shop-admin-token"
	callbackSecret = "toy-shop-callback-secret"
)

// server starts `orderly serve` (built from this repository) on a fresh SQLite database
// and a free loopback port, and returns its base URL; it stops with the test.
func server(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "orderly")
	build := exec.Command("go", "build", "-o", bin, "./cmd/orderly")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build orderly: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(bin, "serve", "--addr", addr, "--database-url", filepath.Join(dir, "orderly.db"),
		"--admin-token", adminToken, "--callback-secret", callbackSecret)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("orderly serve did not become ready in 30 s")
		}
	}
}

// TestToyShop drives a real server with the client as a shop would: stock a SKU, subscribe
// a webhook whose endpoint is down, create an order with metadata (and replay it), pay it
// through the simulated channel's signed callback, refund part of it, then catch up on the
// events the webhook missed with GET /v1/events; bad input answers a problem.
func TestToyShop(t *testing.T) {
	ctx := context.Background()
	c, err := client.NewClientWithResponses(server(t), client.WithBearerToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}

	if r, err := c.SetStockWithResponse(ctx, "TSHIRT-M", client.SetStockJSONRequestBody{Available: 10}); err != nil || r.JSON200 == nil {
		t.Fatalf("set stock: %v %s", err, body(r))
	}
	// A webhook endpoint nobody listens on: its deliveries fail, the events are kept.
	down, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + down.Addr().String() + "/hooks"
	_ = down.Close()
	if r, err := c.CreateWebhookWithResponse(ctx, nil, client.CreateWebhookJSONRequestBody{Url: downURL,
		Topics: []string{"order.paid", "refund.succeeded"}}); err != nil || r.JSON201 == nil {
		t.Fatalf("subscribe: %v %s", err, body(r))
	}
	// And one that is up: it verifies each delivery's signature and keeps the topics.
	const hookSecret = "whsec_toy_shop_0123456789"
	delivered := make(chan string, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := client.VerifySignature(hookSecret, r.Header.Get(client.SignatureHeader), b, time.Now(), 5*time.Minute); err != nil {
			t.Errorf("webhook delivery: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var ev client.Event
		_ = json.Unmarshal(b, &ev)
		delivered <- fmt.Sprintf("%s %v", ev.Topic, ev.Data["metadata"])
	}))
	defer hook.Close()
	if r, err := c.CreateWebhookWithResponse(ctx, nil, client.CreateWebhookJSONRequestBody{Url: hook.URL + "/hooks",
		Topics: []string{"order.paid"}, Secret: client.Ptr(hookSecret)}); err != nil || r.JSON201 == nil {
		t.Fatalf("subscribe: %v %s", err, body(r))
	}

	req := client.CreateOrderJSONRequestBody{UserId: "u-1", Currency: "USD",
		Items:    []client.Item{{Sku: "TSHIRT-M", Quantity: 2, UnitPrice: 1500}},
		Metadata: &client.Metadata{"cart_id": "cart-42"}}
	key := &client.CreateOrderParams{IdempotencyKey: client.Ptr("checkout-42")}
	created, err := c.CreateOrderWithResponse(ctx, key, req)
	if err != nil || created.JSON201 == nil {
		t.Fatalf("create: %v %s", err, body(created))
	}
	o := created.JSON201
	if o.Amount != 3000 || o.State != "pending_payment" || o.Metadata["cart_id"] != "cart-42" {
		t.Fatalf("order = %+v", o)
	}
	replay, err := c.CreateOrderWithResponse(ctx, key, req)
	if err != nil || replay.JSON200 == nil || replay.JSON200.Id != o.Id || replay.HTTPResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %v %s", err, body(replay))
	}

	started, err := c.StartPaymentWithResponse(ctx, o.Id, nil, client.StartPaymentJSONRequestBody{})
	if err != nil || started.JSON201 == nil {
		t.Fatalf("start payment: %v %s", err, body(started))
	}
	pay := started.JSON201
	cb, _ := json.Marshal(client.Callback{PaymentId: pay.PaymentId, OrderId: o.Id, ChannelTxnId: client.Ptr("txn-1"),
		Amount: pay.Amount, Currency: pay.Currency, Status: "succeeded", OccurredAt: time.Now().UTC()})
	for range 2 { // a duplicate callback is acknowledged and changes nothing
		sig := client.Sign(callbackSecret, cb, time.Now())
		r, err := c.PaymentCallbackWithBodyWithResponse(ctx, &client.PaymentCallbackParams{OrderlySignature: sig}, "application/json", bytes.NewReader(cb))
		if err != nil || r.StatusCode() != http.StatusOK {
			t.Fatalf("callback: %v %s", err, body(r))
		}
	}
	if r, err := c.GetOrderWithResponse(ctx, o.Id); err != nil || r.JSON200 == nil || r.JSON200.State != "paid" {
		t.Fatalf("after the payment: %v %s", err, body(r))
	}
	select {
	case got := <-delivered:
		if got != "order.paid map[cart_id:cart-42]" {
			t.Errorf("delivered %q, want order.paid with the order's metadata", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no verified order.paid delivery in 10 s")
	}

	refunded, err := c.CreateRefundWithResponse(ctx, o.Id, &client.CreateRefundParams{IdempotencyKey: client.Ptr("return-1")},
		client.CreateRefundJSONRequestBody{Amount: 1500, Metadata: &client.Metadata{"rma": "R-1"}})
	if err != nil || refunded.JSON201 == nil {
		t.Fatalf("refund: %v %s", err, body(refunded))
	}
	waitFor(t, "the refund to succeed", func() bool {
		r, err := c.GetRefundWithResponse(ctx, refunded.JSON201.Id)
		return err == nil && r.JSON200 != nil && r.JSON200.State == "succeeded"
	})

	// The webhook endpoint was down: catch up on the order's events, page by page.
	var topics []string
	var after *string
	for {
		page, err := c.ListEventsWithResponse(ctx, &client.ListEventsParams{OrderId: &o.Id, After: after, Limit: client.Ptr(1)})
		if err != nil || page.JSON200 == nil {
			t.Fatalf("events: %v %s", err, body(page))
		}
		if len(page.JSON200.Events) == 0 {
			break
		}
		for _, ev := range page.JSON200.Events {
			md, _ := ev.Data["metadata"].(map[string]any)
			topics = append(topics, fmt.Sprintf("%d %s %v", ev.Sequence, ev.Topic, md))
		}
		after = &page.JSON200.NextAfter
	}
	want := []string{"1 order.paid map[cart_id:cart-42]", "2 refund.succeeded map[rma:R-1]"}
	if fmt.Sprint(topics) != fmt.Sprint(want) {
		t.Fatalf("caught-up events = %q, want %q", topics, want)
	}

	// Metadata changes by a merge patch; bad input is a problem and changes nothing.
	patched, err := c.UpdateOrderMetadataWithResponse(ctx, o.Id, client.UpdateOrderMetadataJSONRequestBody{
		Metadata: map[string]*string{"cart_id": nil, "customer": client.Ptr("42")}})
	if err != nil || patched.JSON200 == nil || fmt.Sprint(patched.JSON200.Metadata) != "map[customer:42]" {
		t.Fatalf("patch: %v %s", err, body(patched))
	}
	big := client.Metadata{}
	for i := range 51 {
		big["k"+strconv.Itoa(i)] = "v"
	}
	bad, err := c.CreateOrderWithResponse(ctx, nil, client.CreateOrderJSONRequestBody{UserId: "u-1", Currency: "USD",
		Items: []client.Item{{Sku: "TSHIRT-M", Quantity: 1, UnitPrice: 1500}}, Metadata: &big})
	if err != nil || bad.ApplicationproblemJSON422 == nil || bad.ApplicationproblemJSON422.Type != "https://orderly.dev/problems/invalid-input" {
		t.Fatalf("oversized metadata: %v %s", err, body(bad))
	}
	if r, err := c.ListEventsWithResponse(ctx, &client.ListEventsParams{After: client.Ptr("not-a-position")}); err != nil || r.ApplicationproblemJSON422 == nil {
		t.Fatalf("bad cursor: %v %s", err, body(r))
	}
	if r, err := c.GetStockWithResponse(ctx, "TSHIRT-M"); err != nil || r.JSON200 == nil || r.JSON200.Available != 8 || r.JSON200.Sold != 2 {
		t.Fatalf("stock after one paid order of 2 and refused creates: %v %s", err, body(r))
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}

// body is a generated response's status and body, for a failure message.
func body(r any) string {
	v := reflect.ValueOf(r)
	if !v.IsValid() || v.IsNil() {
		return "(no response)"
	}
	e := v.Elem()
	return fmt.Sprintf("%d %s", e.FieldByName("HTTPResponse").Interface().(*http.Response).StatusCode, e.FieldByName("Body").Bytes())
}
