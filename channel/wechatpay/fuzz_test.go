package wechatpay_test

import (
	"net/http"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

// FuzzVerify: no body or header values panic; every refusal is EUNAUTHORIZED or
// EINVALID; an accepted notification has an id, a known kind, a non-negative amount and
// keeps the body.
func FuzzVerify(f *testing.F) {
	b := setup(f)
	b.paid(f, 100, 0)
	h, body, err := b.srv.TransactionNotification(paymentID, wechatpaytest.NotifyOptions{})
	if err != nil {
		f.Fatal(err)
	}
	ts, nonce, sig, serial := h.Get("Wechatpay-Timestamp"), h.Get("Wechatpay-Nonce"), h.Get("Wechatpay-Signature"), h.Get("Wechatpay-Serial")
	f.Add(body, ts, nonce, sig, serial)
	f.Add([]byte("{}"), ts, nonce, "WECHATPAY/SIGNTEST/"+sig, serial)
	f.Add([]byte(`{"id":"x","resource":{"algorithm":"AEAD_AES_256_GCM","nonce":""}}`), "-1", "", "", "PUB_KEY_ID_")
	f.Fuzz(func(t *testing.T, body []byte, ts, nonce, sig, serial string) {
		hh := http.Header{}
		hh.Set("Wechatpay-Timestamp", ts)
		hh.Set("Wechatpay-Nonce", nonce)
		hh.Set("Wechatpay-Signature", sig)
		hh.Set("Wechatpay-Serial", serial)
		n, err := b.a.Verify(hh, body, clock)
		if err != nil {
			if c := orderly.ErrorCode(err); c != orderly.EUNAUTHORIZED && c != orderly.EINVALID {
				t.Fatalf("error code %s: %v", c, err)
			}
			return
		}
		switch n.Kind {
		case channel.PaymentSucceeded, channel.RefundSucceeded, channel.RefundFailed, channel.Ignored:
		default:
			t.Fatalf("kind %q", n.Kind)
		}
		if n.EventID == "" || n.Amount < 0 || string(n.Body) != string(body) {
			t.Fatalf("accepted %+v", n)
		}
	})
}
