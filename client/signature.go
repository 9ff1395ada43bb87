package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the header that signs a webhook delivery (and a simulated-channel
// payment callback): "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>".
const SignatureHeader = "Orderly-Signature"

// ErrSignature is wrapped by every error of VerifySignature.
var ErrSignature = errors.New("orderly signature")

// Sign returns the SignatureHeader value of body at time t under secret: what a webhook
// delivery carries, and what the simulated payment channel's callbacks must carry (signed
// with the server's callback secret).
func Sign(secret string, body []byte, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// VerifySignature checks a webhook delivery: header is its SignatureHeader value and body
// the raw body as received, byte for byte. The timestamp must be within tolerance of now,
// either way (the server's own is 5 minutes), and one of the v1 signatures must be the
// HMAC of body under secret, compared in constant time (several are sent while a secret
// is rolled). The error wraps ErrSignature and says what is wrong, never the secret.
func VerifySignature(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	switch {
	case err != nil:
		return fmt.Errorf("%w: no valid timestamp in %q", ErrSignature, header)
	case len(sigs) == 0:
		return fmt.Errorf("%w: no hex v1 signature", ErrSignature)
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %d is outside the %s tolerance", ErrSignature, secs, tolerance)
	}
	want := mac(secret, ts, body)
	for _, sig := range sigs {
		if hmac.Equal(sig, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches the body", ErrSignature)
}

func mac(secret, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts + "."))
	h.Write(body)
	return h.Sum(nil)
}
