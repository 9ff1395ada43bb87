package alipay

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"sort"
	"strings"
)

// SignContent returns the text Alipay signs for a set of parameters: the keys sorted in
// ASCII order, skipping those named in drop and those with an empty value, joined as
// k=v with '&', values as decoded (not percent-encoded). Notifications drop "sign" and
// "sign_type"; requests drop "sign" only. Source: Alipay documentation, "自行实现验签"
// (implementing the signature check).
func SignContent(params map[string]string, drop ...string) string {
	keys := make([]string, 0, len(params))
next:
	for k, v := range params {
		if v == "" {
			continue
		}
		for _, d := range drop {
			if k == d {
				continue next
			}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(params[k])
	}
	return b.String()
}

// sign returns the base64 SHA256withRSA (PKCS#1 v1.5) signature of content.
func sign(key *rsa.PrivateKey, content string) (string, error) {
	digest := sha256.Sum256([]byte(content))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, digest[:])
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// verify checks a base64 SHA256withRSA signature of content. A space in the base64 text
// is read as '+': a sender that forgot to percent-encode '+' has it decoded to a space,
// and base64 has no spaces of its own. Decoding is strict (padding bits must be zero), so
// that one signature has one text.
func verify(key *rsa.PublicKey, content []byte, signature string) bool {
	sig, err := base64.StdEncoding.Strict().DecodeString(strings.ReplaceAll(signature, " ", "+"))
	if err != nil {
		return false
	}
	digest := sha256.Sum256(content)
	return rsa.VerifyPKCS1v15(key, crypto.SHA256, digest[:], sig) == nil
}
