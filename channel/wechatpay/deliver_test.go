package wechatpay_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

// A notify URL that verifies with the adapter and answers with its Ack, as the webhook
// route does: a notification and its duplicate get 204 and no body; a probe and a
// tampered body get 401 with WeChat Pay's failure body.
func TestDeliverAndAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1, 0)
	notify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			_, err = b.a.Verify(r.Header, body, clock)
		}
		b.a.Ack(w, err)
	}))
	defer notify.Close()
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	probeH, probeBody := b.srv.Probe()
	tampered := append([]byte(nil), body...)
	tampered[10] ^= 1
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		status int
		answer string
	}{
		{"first", h, body, 204, ""},
		{"duplicate", h, body, 204, ""},
		{"probe", probeH, probeBody, 401, `{"code":"FAIL","message":"wechatpay: signature probe"}`},
		{"tampered", h, tampered, 401, `{"code":"FAIL","message":"wechatpay: signature does not verify with the key of serial ` + wechatpaytest.PlatformSerial + `"}`},
	}
	for _, tt := range tests {
		status, answer, err := wechatpaytest.Deliver(t.Context(), notify.Client(), notify.URL, tt.header, tt.body)
		if err != nil || status != tt.status || string(answer) != tt.answer {
			t.Errorf("%s: %d %s, %v; want %d %s", tt.name, status, answer, err, tt.status, tt.answer)
		}
	}
}
