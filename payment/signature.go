package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
)

// SignatureHeader is the HTTP header that carries a callback's signature.
const SignatureHeader = "Orderly-Signature"

// DefaultSignatureTolerance is how far a signature's timestamp may be from now, either way
// (docs/concepts/payments.md): 5 minutes.
const DefaultSignatureTolerance = 5 * time.Minute

// Sign returns the Orderly-Signature header value for body signed at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<unix seconds>." + body)>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks an Orderly-Signature header value against body: the timestamp must be
// within tolerance of now (either way) and one v1 signature must match, compared in constant
// time. Several v1 entries are allowed (secret rotation). It returns an *orderly.Error with
// code EUNAUTHORIZED saying what is wrong, or nil.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	return VerifyHeader(SignatureHeader, [][]byte{secret}, header, body, now, tolerance)
}

// VerifyHeader checks a "t=<unix seconds>,v1=<hex>[,v1=…]" header value, sent in the
// header named name, against body as received, byte for byte: the timestamp must be within
// tolerance of now (either way), and one of its v1 signatures must be HMAC-SHA256 of
// "<t>." + body under one of secrets (several while a secret is rolled), compared in
// constant time; other schemes (Stripe's v0) are ignored. This is the scheme of
// Orderly-Signature and of Stripe-Signature (package channel/stripe). It returns an
// *orderly.Error with code EUNAUTHORIZED naming what is wrong (never a secret or an
// expected signature), or nil.
func VerifyHeader(name string, secrets [][]byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if header == "" {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "missing %s header", name)
	}
	var (
		ts        string
		sigs      [][]byte
		malformed int // v1 values that are not hex
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			} else {
				malformed++
			}
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s has no valid timestamp", name)
	}
	if len(sigs) == 0 && malformed > 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s has a v1 signature that is not hex (HMAC-SHA256 as 64 hex digits)", name)
	} else if len(sigs) == 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s has no v1 signature", name)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s timestamp is outside the %s tolerance", name, tolerance)
	}
	match := false
	for _, secret := range secrets {
		want := mac(secret, ts, body)
		for _, sig := range sigs {
			// Every comparison runs: the time taken does not tell which one matched.
			if hmac.Equal(want, sig) {
				match = true
			}
		}
	}
	if !match {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s does not match the body", name)
	}
	return nil
}
