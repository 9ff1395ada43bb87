// Package alipay is the Alipay channel: the async notification of the Alipay OpenAPI
// (RSA2, form-urlencoded), verified byte-exactly the way Alipay signs it, and the outbound
// OpenAPI gateway calls alipay.trade.precreate, alipay.trade.query, alipay.trade.close,
// alipay.trade.refund and alipay.trade.fastpay.refund.query, signed with the merchant's app
// private key and answered by Alipay with responses verified with the Alipay public key.
// With Config.PayMode "page" or "wap" the attempt is instead a signed alipay.trade.page.pay
// or alipay.trade.wap.pay URL for the buyer's browser. The state mapping is in
// docs/payments/alipay.md.
//
// Identifiers: out_trade_no is orderly's payment id without its dashes
// (channel.OutTradeNo), trade_no is the notification's ChannelTxnID, notify_id its EventID,
// and a refund's out_request_no is orderly's refund idempotency key (echoed by refund
// notifications as out_biz_no). Amounts are decimal strings in yuan ("0.01"), converted
// exactly to minor units (channel.ParseDecimal). Alipay notifications carry no timestamp
// to check a replay window against: a replay of an old authentic notification decodes
// again, and the engine's dedupe on notify_id and the payment's state guards make it
// harmless. Sources: Alipay open platform documentation, "异步通知验签" (async notify
// verification) and the alipay.trade.* API references.
package alipay

import (
	"cmp"
	"crypto/rsa"
	"errors"
	"net/http"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// Name is the channel's name as recorded on payments.
const Name = "alipay"

// DefaultBaseURL is the production OpenAPI gateway. The sandbox is
// https://openapi-sandbox.dl.alipaydev.com/gateway.do.
const DefaultBaseURL = "https://openapi.alipay.com/gateway.do"

// Config configures the Alipay channel. The keys and ids come from the Alipay open
// platform console (开放平台 → 应用 → 开发设置, "接口加签方式: 公钥", RSA2).
type Config struct {
	// AppID is the app's id (app_id, "2021…"); required. A notification for another app
	// is refused (EINVALID).
	AppID string
	// SellerID is the merchant's Alipay user id (PID, "2088…", 16 digits); required. A
	// notification for another seller is refused (EINVALID).
	SellerID string
	// PrivateKey is the app private key that signs requests (RSA-2048); required.
	// channel.ParseRSAPrivateKey reads it as the console's tool exports it.
	PrivateKey *rsa.PrivateKey
	// AlipayPublicKey verifies notifications and responses (the "支付宝公钥", not the app
	// public key); required. channel.ParseRSAPublicKey reads it.
	AlipayPublicKey *rsa.PublicKey
	// BaseURL is the OpenAPI gateway; default DefaultBaseURL.
	BaseURL string
	// NotifyURL is sent as notify_url with alipay.trade.precreate: where Alipay posts the
	// notifications, orderly's https://<host>/v1/channels/alipay/webhook. Empty: the app's
	// default notify URL set in the console is used.
	NotifyURL string
	// PayMode chooses the buyer's handoff: PayModeQR ("" or "qr", the default:
	// alipay.trade.precreate, 当面付, a QR code to scan with the Alipay app), PayModePage
	// ("page": alipay.trade.page.pay, 电脑网站支付, a URL for a desktop browser) or PayModeWAP
	// ("wap": alipay.trade.wap.pay, 手机网站支付, a URL for a mobile browser).
	PayMode string
	// ReturnURL is sent as return_url with page and wap pay: where Alipay sends the buyer's
	// browser back after paying (the shop's page; it proves nothing, the notification does).
	// Empty: none.
	ReturnURL string
	// Currency is the currency of every amount Alipay sends and receives; default "CNY"
	// (domestic trades are in yuan).
	Currency string
	// HTTPClient makes the outbound calls; default a client with a 10 s timeout per call.
	HTTPClient *http.Client
	// Now is the clock for the requests' timestamp parameter; default time.Now.
	Now func() time.Time
}

// Adapter is the Alipay channel. It is safe for concurrent use.
type Adapter struct {
	cfg Config
}

var _ channel.Adapter = (*Adapter)(nil)

// Pay modes (Config.PayMode).
const (
	PayModeQR   = "qr"   // alipay.trade.precreate: next_action display_qr_code
	PayModePage = "page" // alipay.trade.page.pay: next_action redirect_to_url
	PayModeWAP  = "wap"  // alipay.trade.wap.pay: next_action redirect_to_url
)

// New returns the Alipay adapter. Errors: a required field of cfg is missing, PayMode is
// not one of the PayMode* constants, or Currency is not an ISO 4217 currency.
func New(cfg Config) (*Adapter, error) {
	switch {
	case cfg.AppID == "":
		return nil, errors.New("alipay: AppID is required")
	case cfg.SellerID == "":
		return nil, errors.New("alipay: SellerID is required")
	case cfg.PrivateKey == nil:
		return nil, errors.New("alipay: PrivateKey is required")
	case cfg.AlipayPublicKey == nil:
		return nil, errors.New("alipay: AlipayPublicKey is required")
	}
	switch cfg.PayMode {
	case "", PayModeQR, PayModePage, PayModeWAP:
	default:
		return nil, errors.New("alipay: PayMode " + cfg.PayMode + " is not qr, page or wap")
	}
	cfg.PayMode = cmp.Or(cfg.PayMode, PayModeQR)
	cfg.BaseURL = cmp.Or(cfg.BaseURL, DefaultBaseURL)
	cfg.Currency = cmp.Or(cfg.Currency, "CNY")
	if !orderly.ValidCurrency(cfg.Currency) {
		return nil, errors.New("alipay: Currency " + cfg.Currency + " is not an ISO 4217 currency")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Adapter{cfg: cfg}, nil
}

// Name implements channel.Adapter: "alipay".
func (a *Adapter) Name() string { return Name }

// beijing is Alipay's time zone (China Standard Time, UTC+8, no daylight saving): every
// time Alipay sends ("2024-05-01 12:00:00") and the timestamp of requests.
var beijing = time.FixedZone("CST", 8*60*60)

// timeLayout is Alipay's time format; fractional seconds (gmt_refund) parse too.
const timeLayout = "2006-01-02 15:04:05"
