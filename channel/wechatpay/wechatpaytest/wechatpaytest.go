// Package wechatpaytest is an imitation of WeChat Pay (API v3) for tests and simulations: a
// local HTTP server that answers Native orders, query and close by out_trade_no and
// domestic refunds, signed like WeChat Pay (with its platform certificate or its public
// key), keeps the state of each order, and mints signed, encrypted notifications to
// deliver to a notify URL (again, re-formatted, as probes). No network is used.
//
// Its keys are test-only RSA-2048 keys committed under testdata (see testdata/README), and
// APIv3Key is public: anything they sign or encrypt is worthless outside tests. Its
// signing and encryption code is written apart from package wechatpay's, so that a test of
// the adapter against it checks one against the other.
package wechatpaytest

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/orderlyhq/orderly/channel"
)

// Ids and secrets of the imitation's merchant (test-only).
const (
	MchID          = "1900000109"
	AppID          = "wxd678efh567hg6787"
	MerchantSerial = "3775B6A45ACD588826D15E583A95F5DD3C1A1A2F"
	PlatformSerial = "5157F09EFDC096DE15EBE81A47057A7232F1B8E1"
	PublicKeyID    = "PUB_KEY_ID_0114232134912410000000000000"
	APIv3Key       = "orderly-test-only-apiv3-key-0032" // 32 bytes
)

var (
	//go:embed testdata/merchant_private.pem
	merchantPEM []byte
	//go:embed testdata/platform_private.pem
	platformPEM []byte
	//go:embed testdata/platform_cert.pem
	platformCertPEM []byte
	//go:embed testdata/pubkey_private.pem
	pubkeyPEM []byte
)

// MerchantKey returns the test-only merchant API private key (the adapter's
// Config.MerchantKey). It panics if the committed key cannot be read.
func MerchantKey() *rsa.PrivateKey { return mustKey(merchantPEM) }

// PlatformKey returns the test-only platform key the imitation signs with under
// PlatformSerial.
func PlatformKey() *rsa.PrivateKey { return mustKey(platformPEM) }

// PublicKeyKey returns the test-only key behind the imitation's WeChat Pay public key
// (PublicKeyID).
func PublicKeyKey() *rsa.PrivateKey { return mustKey(pubkeyPEM) }

// PlatformCertificatePEM returns the imitation's platform certificate (serial
// PlatformSerial), as a merchant downloads it.
func PlatformCertificatePEM() []byte { return platformCertPEM }

func mustKey(b []byte) *rsa.PrivateKey {
	k, err := channel.ParseRSAPrivateKey(b)
	if err != nil {
		panic(fmt.Sprintf("wechatpaytest: committed test key: %v", err))
	}
	return k
}

// certSerial checks the committed certificate against PlatformSerial.
func certSerial() string {
	b, _ := pem.Decode(platformCertPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		panic(fmt.Sprintf("wechatpaytest: committed certificate: %v", err))
	}
	return fmt.Sprintf("%X", c.SerialNumber)
}

// signRSA is the base64 SHA256withRSA signature of text.
func signRSA(key *rsa.PrivateKey, text string) string {
	h := sha256.Sum256([]byte(text))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, h[:])
	if err != nil {
		panic(fmt.Sprintf("wechatpaytest: sign: %v", err))
	}
	return base64.StdEncoding.EncodeToString(sig)
}

// Sign returns the headers WeChat Pay sends with a signed body at time at: timestamp,
// a new nonce, the signature over "timestamp\nnonce\nbody\n" and the serial (PublicKeyID
// when s.UsePublicKey, else PlatformSerial), with Wechatpay-Signature-Type.
func (s *Server) Sign(body []byte, at time.Time) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	nonce := randomHex(16)
	key, serial := s.platformKey, PlatformSerial
	if s.UsePublicKey {
		key, serial = s.pubKey, PublicKeyID
	}
	h := http.Header{}
	h.Set("Wechatpay-Timestamp", ts)
	h.Set("Wechatpay-Nonce", nonce)
	h.Set("Wechatpay-Signature", signRSA(key, ts+"\n"+nonce+"\n"+string(body)+"\n"))
	h.Set("Wechatpay-Serial", serial)
	h.Set("Wechatpay-Signature-Type", "WECHATPAY2-SHA256-RSA2048")
	return h
}

// encrypt seals plain with AEAD_AES_256_GCM under APIv3Key: a new 12-character nonce,
// the base64 of text and tag.
func encrypt(plain []byte, associatedData string) (nonce, ciphertext string) {
	block, err := aes.NewCipher([]byte(APIv3Key))
	if err != nil {
		panic(err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	nonce = randomHex(6) // 12 characters
	return nonce, base64.StdEncoding.EncodeToString(gcm.Seal(nil, []byte(nonce), plain, []byte(associatedData)))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
