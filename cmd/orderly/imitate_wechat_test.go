package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
)

// The printed flags configure a working channel: an adapter built from them creates a
// Native order at the imitation, the printed client step pays it, and the imitation
// notifies the printed notify URL with a notification the adapter verifies.
func TestImitateWeChat(t *testing.T) {
	t.Parallel()
	var adapter atomic.Pointer[wechatpay.Adapter] // set once the flags are read
	got := make(chan *channel.Notification, 1)
	orderlyFake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/channels/wechat/webhook" {
			http.NotFound(w, r)
			return
		}
		a := adapter.Load()
		n, err := a.Verify(r.Header, body, time.Now())
		if err == nil {
			got <- n
		}
		a.Ack(w, err)
	}))
	defer orderlyFake.Close()

	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := imitateWeChat(ctx, pw, "127.0.0.1:0", orderlyFake.URL)
		_ = pw.Close()
		done <- err
	}()
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	for curls := 0; curls < 2 && sc.Scan(); {
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "curl ") {
			curls++
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	flags := map[string][]string{}
	for _, m := range regexp.MustCompile(`--(wechat-[a-z0-9-]+) (\S+)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = append(flags[m[1]], m[2])
	}
	one := func(name string) string {
		if len(flags[name]) != 1 {
			t.Fatalf("--%s printed %d times:\n%s", name, len(flags[name]), out.String())
		}
		return flags[name][0]
	}
	keyPEM, err := flagValue(one("wechat-merchant-key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := channel.ParseRSAPrivateKey([]byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	v3, err := flagValue(one("wechat-apiv3-key"))
	if err != nil {
		t.Fatal(err)
	}
	platform, err := platformKeys(flags["wechat-platform-key"])
	if err != nil || len(platform) != 2 {
		t.Fatalf("platform keys %v, %v; want the certificate and the public key", platform, err)
	}
	if one("wechat-notify-url") != orderlyFake.URL+"/v1/channels/wechat/webhook" {
		t.Fatalf("notify URL %s", one("wechat-notify-url"))
	}
	a, err := wechatpay.New(wechatpay.Config{MchID: one("wechat-mch-id"), AppID: one("wechat-app-id"), MerchantKey: key,
		MerchantSerial: one("wechat-merchant-serial"), APIv3Key: v3, PlatformKeys: platform,
		BaseURL: one("wechat-api-url"), NotifyURL: one("wechat-notify-url")})
	if err != nil {
		t.Fatal(err)
	}
	adapter.Store(a)
	const paymentID = "019a7f3c-5e2b-7c11-9d3e-4f5a6b7c8d9e"
	att, err := a.Create(t.Context(), &orderly.Payment{ID: paymentID, OrderID: "o1", Amount: 1234, Currency: "CNY"})
	if err != nil || att.NextAction == nil {
		t.Fatalf("create: %+v, %v", att, err)
	}
	curl := regexp.MustCompile(`curl -s -X POST (\S+) `).FindStringSubmatch(out.String())
	if curl == nil {
		t.Fatalf("no curl line:\n%s", out.String())
	}
	resp, err := http.Post(curl[1], "application/json", strings.NewReader(`{"code_url":"`+att.NextAction.QRCode+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client step: %d", resp.StatusCode)
	}
	select {
	case n := <-got:
		if n.Kind != channel.PaymentSucceeded || n.PaymentID != paymentID || n.Amount != 1234 || n.Currency != "CNY" {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification reached the notify URL")
	}
	dir := strings.TrimSuffix(strings.TrimPrefix(one("wechat-merchant-key"), "@"), "/apiclient_key.pem")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("key directory %s left behind: %v", dir, err)
	}
}
