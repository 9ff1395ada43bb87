// Package wechatpay is the WeChat Pay channel (API v3): notifications verified the way
// WeChat Pay signs them (SHA256withRSA over "timestamp\nnonce\nbody\n" with the platform
// certificate or the WeChat Pay public key named by Wechatpay-Serial, a 5-minute window,
// probe requests refused) and their resource decrypted with AEAD_AES_256_GCM; and the
// outbound API v3 calls (Native and JSAPI orders, query and close by out_trade_no, domestic
// refund and its query by out_refund_no),
// signed with the merchant's API key (Authorization WECHATPAY2-SHA256-RSA2048) and answered
// with responses verified like notifications.
//
// Identifiers: out_trade_no is orderly's payment id without its dashes
// (channel.OutTradeNo: WeChat takes 6–32 characters), transaction_id the notification's
// ChannelTxnID, the notification id its EventID, and a refund's out_refund_no orderly's
// refund idempotency key (OutRefundNo). Amounts are integers in minor units already (fen
// for CNY). Sources: WeChat Pay API v3 documentation, "签名生成", "签名验证", "证书和回调报文
// 解密", "微信支付公钥", and the verifier and notify handler of the wechatpay-go SDK.
package wechatpay

import (
	"cmp"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// Name is the channel's name as recorded on payments.
const Name = "wechat"

// DefaultBaseURL is the production API v3 host.
const DefaultBaseURL = "https://api.mch.weixin.qq.com"

// Window is the largest distance between a signed message's Wechatpay-Timestamp and the
// verifier's clock: messages outside it are refused (the wechatpay-go SDK's 5 minutes).
const Window = 300 * time.Second

// PublicKeyPrefix starts the Wechatpay-Serial of messages signed with a WeChat Pay public
// key ("PUB_KEY_ID_…") rather than a platform certificate.
const PublicKeyPrefix = "PUB_KEY_ID_"

// Config configures the WeChat Pay channel. The ids, keys and serials come from the WeChat
// Pay merchant platform (商户平台 → 账户中心 → API安全).
type Config struct {
	// MchID is the merchant id (mchid); required. A notification for another merchant is
	// refused (EINVALID).
	MchID string
	// AppID is the app id the payments are made under (appid); required by Create. When
	// set, a payment notification for another app is refused (EINVALID).
	AppID string
	// MerchantKey is the merchant API private key (apiclient_key.pem) that signs requests;
	// required. channel.ParseRSAPrivateKey reads it.
	MerchantKey *rsa.PrivateKey
	// MerchantSerial is the serial number of the merchant API certificate
	// (apiclient_cert.pem), sent as serial_no; required.
	MerchantSerial string
	// APIv3Key is the APIv3 key (32 bytes) that decrypts notification resources; required.
	APIv3Key string
	// PlatformKeys maps a Wechatpay-Serial to the key that verifies what WeChat Pay signs
	// under it: platform certificates by serial number (hex; PlatformCertificate reads
	// one), and the WeChat Pay public key by its id ("PUB_KEY_ID_…"). Keep the old and the
	// new key during a rotation. At least one is required.
	PlatformKeys map[string]*rsa.PublicKey
	// BaseURL is the API host; default DefaultBaseURL.
	BaseURL string
	// NotifyURL is sent as notify_url by Create: orderly's
	// https://<host>/v1/channels/wechat/webhook. Required by Create.
	NotifyURL string
	// Currency is the currency of orders and refunds; default "CNY". Refund notifications
	// carry no currency: they are read in this one.
	Currency string
	// HTTPClient makes the outbound calls; default a client with a 10 s timeout per call.
	HTTPClient *http.Client
	// Now is the clock of request timestamps and of the window applied to responses;
	// default time.Now.
	Now func() time.Time
}

// Adapter is the WeChat Pay channel. It is safe for concurrent use.
type Adapter struct {
	cfg  Config
	keys map[string]*rsa.PublicKey // serial (certificate serials upper case) → key
}

var _ channel.Adapter = (*Adapter)(nil)

// New returns the WeChat Pay adapter. Errors: a required field is missing, APIv3Key is not
// 32 bytes, or Currency is not an ISO 4217 currency.
func New(cfg Config) (*Adapter, error) {
	switch {
	case cfg.MchID == "":
		return nil, errors.New("wechatpay: MchID is required")
	case cfg.MerchantKey == nil:
		return nil, errors.New("wechatpay: MerchantKey is required")
	case cfg.MerchantSerial == "":
		return nil, errors.New("wechatpay: MerchantSerial is required")
	case len(cfg.APIv3Key) != 32:
		return nil, fmt.Errorf("wechatpay: APIv3Key is %d bytes, want 32", len(cfg.APIv3Key))
	case len(cfg.PlatformKeys) == 0:
		return nil, errors.New("wechatpay: PlatformKeys is empty: add the platform certificate or the WeChat Pay public key")
	}
	cfg.BaseURL = strings.TrimSuffix(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	cfg.Currency = cmp.Or(cfg.Currency, "CNY")
	if !orderly.ValidCurrency(cfg.Currency) {
		return nil, errors.New("wechatpay: Currency " + cfg.Currency + " is not an ISO 4217 currency")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	keys := make(map[string]*rsa.PublicKey, len(cfg.PlatformKeys))
	for serial, k := range cfg.PlatformKeys {
		keys[normalSerial(serial)] = k
	}
	return &Adapter{cfg: cfg, keys: keys}, nil
}

// Name implements channel.Adapter: "wechat".
func (a *Adapter) Name() string { return Name }

// normalSerial is the lookup form of a serial: certificate serials are hex, compared
// without regard to case; public key ids are kept as they are.
func normalSerial(s string) string {
	if strings.HasPrefix(s, PublicKeyPrefix) {
		return s
	}
	return strings.ToUpper(s)
}

// PlatformCertificate reads a WeChat Pay platform certificate (PEM) and returns its serial
// number as WeChat Pay writes it in Wechatpay-Serial (upper-case hex) and its RSA key, for
// Config.PlatformKeys. Errors: not a PEM certificate, or its key is not RSA.
func PlatformCertificate(pemBytes []byte) (serial string, key *rsa.PublicKey, err error) {
	b, _ := pem.Decode(pemBytes)
	if b == nil || b.Type != "CERTIFICATE" {
		return "", nil, errors.New("wechatpay: platform certificate: not a PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", nil, fmt.Errorf("wechatpay: platform certificate: %w", err)
	}
	k, ok := c.PublicKey.(*rsa.PublicKey)
	if !ok {
		return "", nil, errors.New("wechatpay: platform certificate: key is not RSA")
	}
	return strings.ToUpper(hex.EncodeToString(c.SerialNumber.Bytes())), k, nil
}

// OutRefundNo is the out_refund_no sent for a refund idempotency key. WeChat Pay takes 1–64
// characters of letters, digits and _-|*@. A key of letters, digits and _-*@ (orderly's
// refund ids) is sent as it is; in a key with ':' and no '|' (orderly's "payment:<id>" for
// the refund of a whole payment) ':' becomes '|' when the result fits; anything else is
// sent as "H" and 40 hex digits of its SHA-256. The mapping is a function of the key, so a
// retry sends the same out_refund_no; RefundKey reverses the first two forms.
func OutRefundNo(key string) string {
	if validRefundNo(key) && !strings.Contains(key, "|") {
		return key
	}
	if !strings.Contains(key, "|") {
		if s := strings.ReplaceAll(key, ":", "|"); validRefundNo(s) {
			return s
		}
	}
	h := sha256.Sum256([]byte(key))
	return "H" + hex.EncodeToString(h[:20])
}

// RefundKey returns the refund idempotency key an out_refund_no was made from by
// OutRefundNo ('|' back to ':'). A hashed key cannot be reversed: it comes back as the
// out_refund_no itself, which OutRefundNo(key) matches.
func RefundKey(outRefundNo string) string {
	return strings.ReplaceAll(outRefundNo, "|", ":")
}

func validRefundNo(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !refundNoByte(s[i]) {
			return false
		}
	}
	return true
}

// refundNoByte reports whether out_refund_no may hold c: letters, digits and _-|*@.
func refundNoByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || strings.IndexByte("_-|*@", c) >= 0
}
