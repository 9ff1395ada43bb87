package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
)

// simulatedLine is the start line of a server whose channel sim is served.
const simulatedLine = "payments are SIMULATED (test only)"

// serveFor runs `orderly serve` with args on port 0 until the test ends and returns its
// base URL and its log.
func serveFor(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var stdout bytes.Buffer
	stderr := newSyncBuffer("orderly serving")
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"orderly", "serve", "--addr", "127.0.0.1:0", "--database-url",
			filepath.Join(t.TempDir(), "o.db"), "--callback-secret", "cb"}, args...), &stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve %v exited %d:\n%s", args, code, stderr.String())
		}
	})
	select {
	case <-stderr.seen:
	case code := <-done:
		done <- code
		t.Fatalf("serve %v exited %d before serving:\n%s", args, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve %v did not log that it serves within 30 s:\n%s", args, stderr.String())
	}
	m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no url in the log:\n%s", stderr.String())
	}
	return m[1], stderr
}

// call sends a JSON request and decodes the answer.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, v
}

// orderToPay creates an order of one unit of a SKU with stock on the server at base.
func orderToPay(t *testing.T, base string) string {
	t.Helper()
	if code, v := call(t, http.MethodPut, base+"/v1/inventory/TSHIRT-M", `{"available": 10}`); code != http.StatusOK {
		t.Fatalf("set stock: %d %v", code, v)
	}
	code, v := call(t, http.MethodPost, base+"/v1/orders", `{"user_id":"u-1","currency":"USD","payment_timeout_seconds":120,
		"items":[{"sku":"TSHIRT-M","quantity":2,"unit_price":1500}]}`)
	if code != http.StatusCreated {
		t.Fatalf("create order: %d %v", code, v)
	}
	return v["id"].(string)
}

// TestServeSimulatedChannel: serve without a real channel serves the quick start on sim
// and says so in exactly one line at start; a channel it does not serve is 422.
func TestServeSimulatedChannel(t *testing.T) {
	t.Parallel()
	base, logs := serveFor(t)
	if n := strings.Count(logs.String(), simulatedLine); n != 1 {
		t.Errorf("%d lines say payments are simulated, want 1:\n%s", n, logs.String())
	}
	id := orderToPay(t, base)
	if code, v := call(t, http.MethodPost, base+"/v1/orders/"+id+"/payments", `{"channel":"stripe"}`); code != http.StatusUnprocessableEntity ||
		!strings.Contains(v["detail"].(string), "the configured channels are sim") {
		t.Errorf("start on stripe: %d %v; want 422 naming sim", code, v)
	}
	if code, v := call(t, http.MethodPost, base+"/v1/orders/"+id+"/payments", ""); code != http.StatusCreated || v["channel"] != "sim" {
		t.Errorf("start on the default channel: %d %v; want 201 on sim", code, v)
	}
}

// TestServeRealChannelRefusesSim: with a real channel (Stripe, against the imitation) and
// without --enable-sim-channel, {"channel":"sim"} is 422 naming stripe, and no line says
// payments are simulated; with --enable-sim-channel sim is served beside it and the start
// line says so.
func TestServeRealChannelRefusesSim(t *testing.T) {
	t.Parallel()
	fake := stripetest.NewServer()
	t.Cleanup(fake.Close)
	stripeArgs := []string{"--stripe-api-key", stripetest.APIKey, "--stripe-webhook-secret", stripetest.WebhookSecret,
		"--stripe-api-url", fake.URL, "--default-channel", "stripe"}

	base, logs := serveFor(t, stripeArgs...)
	if strings.Contains(logs.String(), "SIMULATED") {
		t.Errorf("a server with a real channel and without --enable-sim-channel says payments are simulated:\n%s", logs.String())
	}
	id := orderToPay(t, base)
	code, v := call(t, http.MethodPost, base+"/v1/orders/"+id+"/payments", `{"channel":"sim"}`)
	if detail, _ := v["detail"].(string); code != http.StatusUnprocessableEntity || v["type"] != "https://orderly.dev/problems/invalid-input" ||
		!strings.HasSuffix(detail, "the configured channels are stripe") {
		t.Errorf("start on sim: %d %v; want 422 invalid-input naming stripe", code, v)
	}
	if code, v := call(t, http.MethodGet, base+"/v1/orders/"+id, ""); code != http.StatusOK || v["pay_status"] != "unpaid" {
		t.Errorf("after the refusal: %d %v; want the order unpaid", code, v)
	}

	base, logs = serveFor(t, append(stripeArgs, "--enable-sim-channel")...)
	if n := strings.Count(logs.String(), "channel sim is served beside the real channels (test only)"); n != 1 {
		t.Errorf("%d lines say sim is served beside the real channels, want 1:\n%s", n, logs.String())
	}
	id = orderToPay(t, base)
	if code, v := call(t, http.MethodPost, base+"/v1/orders/"+id+"/payments", `{"channel":"sim"}`); code != http.StatusCreated || v["channel"] != "sim" {
		t.Errorf("start on sim with --enable-sim-channel: %d %v; want 201 on sim", code, v)
	}
}
