package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in two goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The imitation prints serve's flags; an alipay channel made from exactly those flags
// precreates a trade there, the buyer's scan (the printed curl: POST to the qr_code) pays
// it, and the signed notification reaches orderly's webhook path and verifies. The key
// files are gone once the imitation stops. The printed serve command parses through
// serve's own flags and names alipay the default channel.
func TestImitateAlipay(t *testing.T) {
	notified := make(chan []byte, 1)
	orderlySrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/channels/alipay/webhook" {
			notified <- body
		}
		_, _ = io.WriteString(w, "success")
	}))
	defer orderlySrv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- imitateAlipay(ctx, &out, "127.0.0.1:0", orderlySrv.URL) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "refunds/fail") {
		if time.Now().After(deadline) {
			t.Fatalf("no flags printed: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	text := out.String()
	flag := func(name string) string {
		m := regexp.MustCompile(`--` + name + ` (\S+)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("--%s not printed:\n%s", name, text)
		}
		return m[1]
	}
	if !strings.Contains(text, "orderly serve --alipay-app-id") || !strings.Contains(text, `curl -X POST "$QR_CODE"`) {
		t.Fatalf("output:\n%s", text)
	}
	serve := regexp.MustCompile(`orderly serve [^\n]*`).FindString(text)
	if !strings.HasSuffix(serve, " --default-channel alipay") {
		t.Fatalf("serve command without --default-channel alipay: %s", serve)
	}
	if adapters, err := adaptersOf(t, strings.Fields(serve)[2:]...); err != nil || len(adapters) != 1 || adapters[0].Name() != "alipay" {
		t.Fatalf("printed serve flags: adapters %v, %v; want alipay", adapters, err)
	}
	readKey := func(name string) []byte {
		b, err := os.ReadFile(strings.TrimPrefix(flag(name), "@"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	priv, err := channel.ParseRSAPrivateKey(readKey("alipay-private-key"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := channel.ParseRSAPublicKey(readKey("alipay-public-key"))
	if err != nil {
		t.Fatal(err)
	}
	if flag("alipay-notify-url") != orderlySrv.URL+"/v1/channels/alipay/webhook" {
		t.Fatalf("notify url %s", flag("alipay-notify-url"))
	}
	a, err := alipay.New(alipay.Config{AppID: flag("alipay-app-id"), SellerID: flag("alipay-seller-id"), PrivateKey: priv,
		AlipayPublicKey: pub, BaseURL: flag("alipay-api-url"), NotifyURL: flag("alipay-notify-url")})
	if err != nil {
		t.Fatal(err)
	}
	p := &orderly.Payment{ID: "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e", OrderID: "o-1", Amount: 990, Currency: "CNY"}
	attempt, err := a.Create(ctx, p)
	if err != nil || attempt.NextAction == nil || attempt.NextAction.QRCode == "" {
		t.Fatalf("create: %+v, %v", attempt, err)
	}
	resp, err := http.Post(attempt.NextAction.QRCode, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scan: %d", resp.StatusCode)
	}
	n, err := a.Verify(nil, <-notified, time.Now())
	if err != nil || n.Kind != channel.PaymentSucceeded || n.PaymentID != p.ID || n.Amount != 990 {
		t.Fatalf("notification: %+v, %v", n, err)
	}
	if q, err := a.Query(ctx, p); err != nil || q.Status != orderly.GatewaySucceeded || q.ChannelTxnID != n.ChannelTxnID {
		t.Fatalf("query: %+v, %v", q, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strings.TrimPrefix(flag("alipay-private-key"), "@")); !os.IsNotExist(err) {
		t.Fatalf("key file left behind: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}
