package stripe

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
)

// SignatureHeader is the header Stripe signs webhook deliveries in:
// "t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=…][,v0=…]".
const SignatureHeader = "Stripe-Signature"

// DefaultTolerance is how far a signature's timestamp may be from now, either way: 5
// minutes, Stripe's own default (stripe-go webhook.DefaultTolerance).
const DefaultTolerance = 5 * time.Minute

// Sign returns the Stripe-Signature header value of payload signed at t with secret, the
// endpoint's signing secret as Stripe shows it ("whsec_…", used as is: the HMAC key is the
// whole string's bytes, not a decoding of it). The signed bytes are
// "<unix seconds>.<payload>". Tests and the imitation server (package stripetest) sign with
// it, as stripe-go's webhook.GenerateTestSignedPayload does.
func Sign(secret string, t time.Time, payload []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, payload))
}

func mac(secret, ts string, payload []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(payload)
	return h.Sum(nil)
}

// verifySignature checks header against payload, as received, byte for byte: its
// timestamp must be within tolerance of now, and one of its v1 signatures must be the
// HMAC of one of secrets (several during a secret roll), compared in constant time. v0 and
// unknown schemes are ignored. Errors: EUNAUTHORIZED, naming what is wrong but never a
// secret or an expected signature.
func verifySignature(header string, payload []byte, secrets []string, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "no Stripe webhook secret is configured")
	}
	if header == "" {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "missing %s header", SignatureHeader)
	}
	var (
		ts   string
		sigs [][]byte
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
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s has no valid timestamp", SignatureHeader)
	}
	if len(sigs) == 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s has no v1 signature", SignatureHeader)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "%s timestamp is %s from now, outside the %s tolerance",
			SignatureHeader, d.Round(time.Second), tolerance)
	}
	match := false
	for _, secret := range secrets {
		want := mac(secret, ts, payload)
		for _, sig := range sigs {
			// Every comparison runs: the time taken does not tell which one matched.
			if hmac.Equal(want, sig) {
				match = true
			}
		}
	}
	if !match {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "no %s signature matches the body", SignatureHeader)
	}
	return nil
}
