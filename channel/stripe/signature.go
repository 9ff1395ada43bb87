package stripe

import (
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
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
	return payment.Sign([]byte(secret), t, payload)
}

// verifySignature checks header against payload, as received, byte for byte: its
// timestamp must be within tolerance of now, and one of its v1 signatures must be the
// HMAC of one of secrets (several during a secret roll), compared in constant time. v0 and
// unknown schemes are ignored. It is Orderly-Signature's scheme (payment.VerifyHeader).
// Errors: EUNAUTHORIZED, naming what is wrong but never a secret or an expected signature.
func verifySignature(header string, payload []byte, secrets []string, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "no Stripe webhook secret is configured")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return payment.VerifyHeader(SignatureHeader, keys, header, payload, now, tolerance)
}
