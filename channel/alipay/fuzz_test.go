package alipay_test

import (
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
)

// FuzzVerify: no input panics; every refusal is EUNAUTHORIZED or EINVALID; an accepted
// notification names a payment, a known kind and a non-negative amount, and keeps the body.
func FuzzVerify(f *testing.F) {
	b := setup(f)
	if _, err := b.srv.Pay(paymentID, 1); err != nil {
		f.Fatal(err)
	}
	body, err := b.srv.PaymentNotification(paymentID)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(body)
	f.Add(alipaytest.Reencode(body, 1))
	f.Add([]byte("sign=&sign_type=RSA2"))
	f.Add([]byte("a=%zz&b"))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := b.a.Verify(nil, body, clock)
		if err != nil {
			if c := orderly.ErrorCode(err); c != orderly.EUNAUTHORIZED && c != orderly.EINVALID {
				t.Fatalf("error code %s: %v", c, err)
			}
			return
		}
		switch n.Kind {
		case channel.PaymentSucceeded, channel.PaymentFailed, channel.PaymentPending, channel.RefundSucceeded:
		default:
			t.Fatalf("kind %q", n.Kind)
		}
		if n.PaymentID == "" || n.EventID == "" || n.Amount < 0 || string(n.Body) != string(body) {
			t.Fatalf("accepted %+v", n)
		}
	})
}
