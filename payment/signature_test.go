package payment_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sigtest"
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

// TestSignatureRefusalSaysWhy: each malformed header is refused with a message naming
// what is wrong with it (the message reaches the caller's problem+json detail).
func TestSignatureRefusalSaysWhy(t *testing.T) {
	t.Parallel()
	now := time.Unix(1, 0)
	for header, want := range map[string]string{
		"":              "missing Orderly-Signature header",
		"v1=00ff":       "Orderly-Signature has no valid timestamp",
		"t=1":           "Orderly-Signature has no v1 signature",
		"t=1,v0=00ff":   "Orderly-Signature has no v1 signature",
		"t=1,v1=abc":    "Orderly-Signature has a v1 signature that is not hex (HMAC-SHA256 as 64 hex digits)",
		"t=1,v1=00ff":   "Orderly-Signature does not match the body",
		"t=999,v1=00ff": "Orderly-Signature timestamp is outside the 5m0s tolerance",
	} {
		err := payment.Verify([]byte("s"), header, []byte("{}"), now, payment.DefaultSignatureTolerance)
		var oe *orderly.Error
		if !errors.As(err, &oe) || oe.Code != orderly.EUNAUTHORIZED || oe.Message != want {
			t.Errorf("header %q: %v, want %s %q", header, err, orderly.EUNAUTHORIZED, want)
		}
	}
}

// TestSignKnownAnswers checks Sign and Verify against HMAC-SHA256 values computed by
// openssl (sigtest.Vectors), so that Sign and Verify cannot agree on a wrong scheme.
func TestSignKnownAnswers(t *testing.T) {
	t.Parallel()
	for _, v := range sigtest.Vectors {
		secs, err := strconv.ParseInt(v.TS, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Unix(secs, 0)
		want := "t=" + v.TS + ",v1=" + v.MAC
		if got := payment.Sign([]byte(v.Secret), at, []byte(v.Body)); got != want {
			t.Errorf("Sign(%q, %s, %q) = %s, openssl says %s", v.Secret, v.TS, v.Body, got, want)
		}
		if err := payment.Verify([]byte(v.Secret), want, []byte(v.Body), at, time.Minute); err != nil {
			t.Errorf("Verify refused the openssl signature %s: %v", want, err)
		}
	}
}

// FuzzVerify checks payment.Verify against the reference implementation in
// internal/sigtest, which is independent of package payment and pinned by openssl vectors:
//   - soundness: Verify accepts a header only if the reference finds it authentic (a
//     timestamp within tolerance whose MAC over this body is among the v1 entries);
//   - completeness: a header signed by the reference at any time within tolerance is
//     accepted, and the same header is refused for any other body.
func FuzzVerify(f *testing.F) {
	secret := []byte("s3cret")
	now := time.Unix(1_764_500_000, 0)
	const tol = time.Minute
	f.Add(sigtest.Header(secret, now, []byte("{}")), []byte("{}"), int64(0))
	f.Add("t=,v1=", []byte(""), int64(60))
	f.Add("t=1764500000,t=1764500000,v1=", []byte("x"), int64(-60))
	f.Add("t=1764500000,v1="+strings.ToUpper(sigtest.MAC(secret, "1764500000", nil)), []byte(nil), int64(-61))
	f.Add("t=+1764500000,v1="+sigtest.MAC(secret, "+1764500000", nil), []byte(nil), int64(1<<62))
	f.Add(" t=1764500000 , v1=00 ", []byte(`{"a":1}`), int64(-1<<62))
	f.Fuzz(func(t *testing.T, header string, body []byte, offset int64) {
		if err := payment.Verify(secret, header, body, now, tol); err == nil {
			if !sigtest.Authentic(secret, header, body, now, tol) {
				t.Fatalf("Verify accepted %q for body %q, which the reference finds not authentic", header, body)
			}
		} else if orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
			t.Fatalf("Verify(%q) error %v, want %s", header, err, orderly.EUNAUTHORIZED)
		}

		secs := offset % int64(tol/time.Second+1) // -tol … +tol, in whole seconds
		signed := sigtest.Header(secret, now.Add(time.Duration(secs)*time.Second), body)
		if err := payment.Verify(secret, signed, body, now, tol); err != nil {
			t.Fatalf("Verify refused the reference signature %q (%+ds) for body %q: %v", signed, secs, body, err)
		}
		if payment.Verify(secret, signed, append(slices.Clip(body), 'x'), now, tol) == nil {
			t.Fatalf("header %q verifies another body than %q", signed, body)
		}
	})
}
