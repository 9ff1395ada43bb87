// Package alipaytest is an imitation of Alipay for tests and simulations: a local HTTP
// server that answers the OpenAPI gateway (alipay.trade.precreate, query, close, refund,
// fastpay.refund.query) signed like Alipay, opens signed page and wap pay URLs, keeps the
// state of each trade and refund, plays the buyer paying at a QR code or cashier (POST
// /qr/<token>, which sends the signed async notification to the trade's notify_url), and
// mints signed async notifications to deliver to a notify URL (again, re-encoded,
// tampered with). Refunds are carried out at once (fund_change Y) or, in RefundDeferred
// mode, accepted with fund_change N and settled or failed later. No network beyond the
// local host is used.
//
// Its keys are test-only RSA-2048 keys committed under testdata (see testdata/README):
// anything they sign is worthless outside tests. Its signing code is written apart from
// package alipay's, so that a test of the adapter against it checks one against the other.
package alipaytest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"

	"github.com/orderlyhq/orderly/channel"
)

// Ids of the imitation's merchant.
const (
	AppID    = "2021000000000001"
	SellerID = "2088000000000001"
)

//go:embed testdata/merchant_private.pem
var merchantPEM []byte

//go:embed testdata/alipay_private.pem
var alipayPEM []byte

// MerchantKey returns the test-only merchant app private key (the adapter's
// Config.PrivateKey); it panics if the committed key cannot be read.
func MerchantKey() *rsa.PrivateKey { return mustKey(merchantPEM) }

// AlipayKey returns the test-only key the imitation signs with; its public half is the
// adapter's Config.AlipayPublicKey. It panics if the committed key cannot be read.
func AlipayKey() *rsa.PrivateKey { return mustKey(alipayPEM) }

func mustKey(pemBytes []byte) *rsa.PrivateKey {
	k, err := channel.ParseRSAPrivateKey(pemBytes)
	if err != nil {
		panic(fmt.Sprintf("alipaytest: committed test key: %v", err))
	}
	return k
}

// content is the text Alipay signs: sorted keys but the dropped ones, empty values
// skipped, k=v joined by '&'.
func content(params map[string]string, drop ...string) string {
	var pairs []string
	for k, v := range params {
		skip := v == ""
		for _, d := range drop {
			skip = skip || k == d
		}
		if !skip {
			pairs = append(pairs, k+"="+v)
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		ki, _, _ := strings.Cut(pairs[i], "=")
		kj, _, _ := strings.Cut(pairs[j], "=")
		return ki < kj
	})
	return strings.Join(pairs, "&")
}

func rsaSign(key *rsa.PrivateKey, text string) string {
	h := sha256.Sum256([]byte(text))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, h[:])
	if err != nil {
		panic(fmt.Sprintf("alipaytest: sign: %v", err))
	}
	return base64.StdEncoding.EncodeToString(sig)
}

func rsaVerify(key *rsa.PublicKey, text, signature string) bool {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return false
	}
	h := sha256.Sum256([]byte(text))
	return rsa.VerifyPKCS1v15(key, crypto.SHA256, h[:], sig) == nil
}
