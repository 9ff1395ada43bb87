package payment_test

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

func TestSignature(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	body := []byte(`{"payment_id":"p1"}`)
	now := time.Unix(1_764_500_000, 0)
	good := payment.Sign(secret, now, body)
	if want := "t=1764500000,v1="; good[:len(want)] != want || len(good) != len(want)+64 {
		t.Fatalf("Sign = %q", good)
	}
	tol := payment.DefaultSignatureTolerance
	for _, tc := range []struct {
		name   string
		header string
		body   []byte
		now    time.Time
		ok     bool
	}{
		{"valid", good, body, now, true},
		{"valid at the edge of the tolerance", good, body, now.Add(5 * time.Minute), true},
		{"second signature matches (rotation)", "t=1764500000,v1=00ff," + good[len("t=1764500000,"):], body, now, true},
		{"expired", good, body, now.Add(5*time.Minute + time.Second), false},
		{"from the future", good, body, now.Add(-6 * time.Minute), false},
		{"tampered body", good, []byte(`{"payment_id":"p2"}`), now, false},
		{"other secret", payment.Sign([]byte("other"), now, body), body, now, false},
		{"missing", "", body, now, false},
		{"no timestamp", good[len("t=1764500000,"):], body, now, false},
		{"garbage", "t=abc,v1=zz", body, now, false},
		{"timestamp swapped", "t=1764500001" + good[len("t=1764500000"):], body, now, false},
	} {
		err := payment.Verify(secret, tc.header, tc.body, tc.now, tol)
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if !tc.ok && orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
			t.Errorf("%s: error %v, want %s", tc.name, err, orderly.EUNAUTHORIZED)
		}
	}
}

func FuzzVerify(f *testing.F) {
	secret := []byte("s3cret")
	now := time.Unix(1_764_500_000, 0)
	f.Add(payment.Sign(secret, now, []byte("{}")), []byte("{}"))
	f.Add("t=,v1=", []byte(""))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := payment.Verify(secret, header, body, now, time.Minute)
		if err == nil && header != payment.Sign(secret, now, body) {
			// Accepting means some v1 entry is the right MAC for this body and a fresh t;
			// the same header must then refuse any other body.
			if payment.Verify(secret, header, append(body, 'x'), now, time.Minute) == nil {
				t.Fatalf("header %q verifies two different bodies", header)
			}
		}
	})
}
