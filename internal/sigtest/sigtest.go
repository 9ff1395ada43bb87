// Package sigtest is a reference implementation of the callback signature scheme, written
// from its specification and independent of package payment, for tests to use as an
// oracle: Orderly-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>,
// with a timestamp tolerance either way and any v1 entry matching (secret rotation). Its
// known-answer vectors (Vectors) come from openssl, so a bug shared by payment.Sign
// and payment.Verify cannot hide behind a test that checks one with the other.
package sigtest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// Vectors are known answers computed with OpenSSL 3.0, independently of any Go code here:
//
//	printf '%s' "$TS.$BODY" | openssl dgst -sha256 -hmac "$SECRET"
//
// (the third vector's body ends in a real newline, so it is printed with printf "$TS.…\n").
var Vectors = []struct {
	Secret, TS, Body, MAC string
}{
	// printf '%s' '1764500000.{"payment_id":"p1"}' | openssl dgst -sha256 -hmac 's3cret'
	{"s3cret", "1764500000", `{"payment_id":"p1"}`, "0fa3c64c6d083e8f45c28a213f8cf5d0062c427cde0e87d53a70cc0f61d026fa"},
	// printf '%s' '1764500000.' | openssl dgst -sha256 -hmac 's3cret'   (empty body)
	{"s3cret", "1764500000", ``, "404e6ab291e8195bab924184b46c800392972fe562bfc5134d2ea298485a748b"},
	// K=$(printf 'k%.0s' $(seq 1 70))   (a 70-byte key: longer than SHA-256's block, so HMAC hashes it)
	// printf '1764500000.{"note":"caf\xc3\xa9\\n"}\n' | openssl dgst -sha256 -hmac "$K"
	{strings.Repeat("k", 70), "1764500000", "{\"note\":\"caf\u00e9\\n\"}\n", "3cd5c781c5b35f8de721bf69a640f8a698e39b2711a93284806f97e5c6b66e6f"},
	// printf '%s' '0.' | openssl dgst -sha256 -hmac 'k'
	{"k", "0", ``, "6b4a4b8b3c40f1e8f53a3d36682e5f99f7ad2ac1df1c93dfe336f329167641e7"},
}

// MAC returns hex(HMAC-SHA256(secret, ts + "." + body)) in lower case.
func MAC(secret []byte, ts string, body []byte) string {
	h := hmac.New(sha256.New, secret)
	msg := make([]byte, 0, len(ts)+1+len(body))
	msg = append(append(append(msg, ts...), '.'), body...)
	h.Write(msg)
	return hex.EncodeToString(h.Sum(nil))
}

// Header returns the header value for body signed at t (whole unix seconds).
func Header(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + MAC(secret, ts, body)
}

// Authentic reports whether header may be accepted for body at now: some "t=" entry is a
// unix time within tolerance of now and some "v1=" entry is the MAC of body under that
// entry's text. A verifier that accepts a header for which Authentic is false accepts a
// forgery or a replay. Entries are separated by commas; blanks around an entry and
// upper-case hex digits are tolerated.
func Authentic(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) bool {
	var stamps, sigs []string
	for _, entry := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(entry), "=")
		switch {
		case !ok:
		case k == "t":
			stamps = append(stamps, v)
		case k == "v1":
			sigs = append(sigs, strings.ToLower(v))
		}
	}
	for _, ts := range stamps {
		secs, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			continue
		}
		// Sub saturates, so far-off timestamps read as far off, not as wrapped around.
		if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
			continue
		}
		want := MAC(secret, ts, body)
		for _, s := range sigs {
			if s == want {
				return true
			}
		}
	}
	return false
}
