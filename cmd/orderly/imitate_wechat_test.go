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
// notifies the printed notify URL with a notification the adapter verifies. The printed
// serve command parses through serve's own flags and names wechat the default channel, and
// the printed refund plays hold a refund in PROCESSING, then move it to ABNORMAL and SUCCESS.
func TestImitateWeChat(t *testing.T) {
	t.Parallel()
	var adapter atomic.Pointer[wechatpay.Adapter] // set once the flags are read
	got := make(chan *channel.Notification, 8)    // the payment, then the refund's ABNORMAL and SUCCESS
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
	for curls := 0; curls < 4 && sc.Scan(); {
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
	serve := out.String()[strings.Index(out.String(), "orderly serve"):]
	serve = strings.ReplaceAll(serve[:strings.Index(serve, "\n\n")], "\\\n", " ")
	args := strings.Fields(serve)
	if !strings.HasSuffix(serve, "--default-channel wechat") {
		t.Fatalf("serve command without --default-channel wechat: %s", serve)
	}
	if adapters, err := adaptersOf(t, args[2:]...); err != nil || len(adapters) != 1 || adapters[0].Name() != "wechat" {
		t.Fatalf("printed serve flags: adapters %v, %v; want wechat", adapters, err)
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

	post := func(url string, want int) {
		t.Helper()
		resp, err := http.Post(url, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d, want %d", url, resp.StatusCode, want)
		}
	}
	hold := regexp.MustCompile(`curl -s -X POST '(\S+/imitation/refunds/hold\?on=true)'`).FindStringSubmatch(out.String())
	settle := regexp.MustCompile(`curl -s -X POST "(\S+/imitation/refunds/settle\?out_refund_no=)\$REFUND_ID&status=SUCCESS"`).FindStringSubmatch(out.String())
	if hold == nil || settle == nil {
		t.Fatalf("no refund curl lines:\n%s", out.String())
	}
	post(hold[1], http.StatusNoContent)
	const refundID = "019a7f3d-0000-7c11-9d3e-4f5a6b7c8d9e"
	ref := &orderly.GatewayRefund{IdempotencyKey: refundID, PaymentID: paymentID, Amount: 400, Currency: "CNY"}
	if res, err := a.Refund(t.Context(), ref); err != nil || res.Status != orderly.GatewayPending || res.Detail != "PROCESSING" {
		t.Fatalf("refund while held: %+v, %v; want pending PROCESSING", res, err)
	}
	post(settle[1]+"nosuch&status=SUCCESS", http.StatusNotFound)
	post(settle[1]+refundID+"&status=DONE", http.StatusBadRequest)
	for _, status := range []string{"ABNORMAL", "SUCCESS"} {
		post(settle[1]+wechatpay.OutRefundNo(refundID)+"&status="+status, http.StatusOK)
		res, err := a.QueryRefund(t.Context(), ref)
		if want := map[string]orderly.GatewayStatus{"ABNORMAL": orderly.GatewayPending, "SUCCESS": orderly.GatewaySucceeded}[status]; err != nil || res.Status != want {
			t.Fatalf("query after %s: %+v, %v; want %v", status, res, err, want)
		}
		select {
		case n := <-got:
			if n.RefundID != refundID || (status == "SUCCESS") != (n.Kind == channel.RefundSucceeded) {
				t.Fatalf("REFUND.%s notification %+v", status, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no REFUND.%s notification", status)
		}
	}
	post(hold[1][:len(hold[1])-len("true")]+"maybe", http.StatusBadRequest)
	dir := strings.TrimSuffix(strings.TrimPrefix(one("wechat-merchant-key"), "@"), "/apiclient_key.pem")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("key directory %s left behind: %v", dir, err)
	}
}
