package alipay_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
)

// A notify URL that verifies with the adapter and answers with its Ack, as the webhook
// route does: Alipay's delivery of a notification, its duplicate and a re-encoding get
// "success"; a tampered one gets "fail" (and Alipay would retry).
func TestDeliverAndAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.paid(t, 1)
	notify := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			_, err = b.a.Verify(r.Header, body, clock)
		}
		b.a.Ack(w, err)
	}))
	defer notify.Close()
	body, err := b.srv.PaymentNotification(paymentID)
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-1] ^= 1
	tests := []struct {
		name   string
		body   []byte
		status int
		ack    string
	}{
		{"first", body, 200, "success"},
		{"duplicate", body, 200, "success"},
		{"re-encoded", alipaytest.Reencode(body, 7), 200, "success"},
		{"tampered", tampered, 401, "fail"},
	}
	for _, tt := range tests {
		status, ack, err := alipaytest.Deliver(t.Context(), notify.Client(), notify.URL, tt.body)
		if err != nil || status != tt.status || ack != tt.ack {
			t.Errorf("%s: %d %q, %v; want %d %q", tt.name, status, ack, err, tt.status, tt.ack)
		}
	}
}
