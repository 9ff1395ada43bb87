package main

import (
	"crypto/rsa"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/wechatpay"
)

// cnChannelFlags are serve's flags of the Alipay and WeChat Pay channels. A channel is on
// when any of its flags is given, and then all of its required ones must be (cnChannels).
// Key flags take the key itself (PEM, or the bare base64 the Alipay console shows) or
// @path of a file holding it; their values are never logged or echoed in errors.
func cnChannelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "alipay-app-id", Usage: "Alipay app_id (2021…); with the other --alipay-* flags turns the alipay channel on (notify: POST /v1/channels/alipay/webhook)", Sources: env("alipay-app-id")},
		&cli.StringFlag{Name: "alipay-seller-id", Usage: "the merchant's Alipay user id (PID, 2088…); notifications for another seller are refused", Sources: env("alipay-seller-id")},
		&cli.StringFlag{Name: "alipay-private-key", Usage: "app private key (RSA2) that signs requests: PEM, base64 DER, or @file", Sources: env("alipay-private-key")},
		&cli.StringFlag{Name: "alipay-public-key", Usage: "the Alipay public key (支付宝公钥, not the app's) that verifies notifications: PEM, base64 DER, or @file", Sources: env("alipay-public-key")},
		&cli.StringFlag{Name: "alipay-api-url", Usage: "Alipay OpenAPI gateway (default " + alipay.DefaultBaseURL + "; the sandbox or an imitation in tests)", Sources: env("alipay-api-url")},
		&cli.StringFlag{Name: "alipay-pay-mode", Value: alipay.PayModeQR, Usage: "the buyer's handoff: qr (alipay.trade.precreate, a QR code to scan), page (alipay.trade.page.pay, a URL for a desktop browser) or wap (alipay.trade.wap.pay, a mobile browser)", Sources: env("alipay-pay-mode")},
		&cli.StringFlag{Name: "alipay-return-url", Usage: "return_url of page and wap pay: where Alipay sends the buyer's browser after paying", Sources: env("alipay-return-url")},
		&cli.StringFlag{Name: "alipay-notify-url", Usage: "notify_url sent with each trade: https://<host>/v1/channels/alipay/webhook (empty: the app's default set in the console)", Sources: env("alipay-notify-url")},
		&cli.StringFlag{Name: "wechat-mch-id", Usage: "WeChat Pay merchant id (mchid); with the other --wechat-* flags turns the wechat channel on (notify: POST /v1/channels/wechat/webhook)", Sources: env("wechat-mch-id")},
		&cli.StringFlag{Name: "wechat-app-id", Usage: "app id (appid) the payments are made under", Sources: env("wechat-app-id")},
		&cli.StringFlag{Name: "wechat-merchant-key", Usage: "merchant API private key (apiclient_key.pem) that signs requests: PEM, base64 DER, or @file", Sources: env("wechat-merchant-key")},
		&cli.StringFlag{Name: "wechat-merchant-serial", Usage: "serial number of the merchant API certificate (apiclient_cert.pem)", Sources: env("wechat-merchant-serial")},
		&cli.StringFlag{Name: "wechat-apiv3-key", Usage: "APIv3 key (32 bytes) that decrypts notification resources, or @file", Sources: env("wechat-apiv3-key")},
		&cli.StringSliceFlag{Name: "wechat-platform-key", Usage: "key that verifies WeChat Pay's signatures: SERIAL=FILE (a platform certificate, or the WeChat Pay public key under its PUB_KEY_ID_… id) or FILE of a platform certificate (its serial is read); repeat or comma-separate to keep old and new during a rotation", Sources: env("wechat-platform-key")},
		&cli.StringFlag{Name: "wechat-api-url", Usage: "WeChat Pay API host (default " + wechatpay.DefaultBaseURL + "; an imitation in tests)", Sources: env("wechat-api-url")},
		&cli.StringFlag{Name: "wechat-notify-url", Usage: "notify_url sent with each order: https://<host>/v1/channels/wechat/webhook", Sources: env("wechat-notify-url")},
	}
}

// cnChannels returns the Alipay and WeChat Pay adapters serve's flags turn on. Errors
// (usage, exit status 2) name the flags: a channel given only some of its required flags
// ("--alipay-app-id is set, so --alipay-seller-id and --alipay-public-key are required"),
// a key that does not parse, an unreadable @file, an APIv3 key that is not 32 bytes.
func cnChannels(cmd *cli.Command) ([]channel.Adapter, error) {
	var out []channel.Adapter
	if anySet(cmd, "alipay-") {
		if err := required(cmd, "alipay-app-id", "alipay-seller-id", "alipay-private-key", "alipay-public-key"); err != nil {
			return nil, err
		}
		if mode := cmd.String("alipay-pay-mode"); !slices.Contains([]string{alipay.PayModeQR, alipay.PayModePage, alipay.PayModeWAP}, mode) {
			return nil, fmt.Errorf("--alipay-pay-mode must be qr, page or wap, not %q", mode)
		}
		priv, err := keyFlag(cmd, "alipay-private-key", channel.ParseRSAPrivateKey)
		if err != nil {
			return nil, err
		}
		pub, err := keyFlag(cmd, "alipay-public-key", channel.ParseRSAPublicKey)
		if err != nil {
			return nil, err
		}
		a, err := alipay.New(alipay.Config{AppID: cmd.String("alipay-app-id"), SellerID: cmd.String("alipay-seller-id"),
			PrivateKey: priv, AlipayPublicKey: pub, BaseURL: cmd.String("alipay-api-url"), NotifyURL: cmd.String("alipay-notify-url"),
			PayMode: cmd.String("alipay-pay-mode"), ReturnURL: cmd.String("alipay-return-url")})
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if anySet(cmd, "wechat-") {
		if err := required(cmd, "wechat-mch-id", "wechat-app-id", "wechat-merchant-key", "wechat-merchant-serial",
			"wechat-apiv3-key", "wechat-platform-key", "wechat-notify-url"); err != nil {
			return nil, err
		}
		key, err := keyFlag(cmd, "wechat-merchant-key", channel.ParseRSAPrivateKey)
		if err != nil {
			return nil, err
		}
		v3, err := flagValue(cmd.String("wechat-apiv3-key"))
		if err != nil {
			return nil, fmt.Errorf("--wechat-apiv3-key: %w", err)
		} else if v3 = strings.TrimSpace(v3); len(v3) != 32 {
			return nil, fmt.Errorf("--wechat-apiv3-key must be 32 bytes, got %d", len(v3))
		}
		platform, err := platformKeys(cmd.StringSlice("wechat-platform-key"))
		if err != nil {
			return nil, err
		}
		a, err := wechatpay.New(wechatpay.Config{MchID: cmd.String("wechat-mch-id"), AppID: cmd.String("wechat-app-id"),
			MerchantKey: key, MerchantSerial: cmd.String("wechat-merchant-serial"), APIv3Key: v3, PlatformKeys: platform,
			BaseURL: cmd.String("wechat-api-url"), NotifyURL: cmd.String("wechat-notify-url")})
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// anySet reports whether a flag of cnChannelFlags named prefix… is given.
func anySet(cmd *cli.Command, prefix string) bool {
	for _, f := range cnChannelFlags() {
		if name := f.Names()[0]; strings.HasPrefix(name, prefix) && cmd.IsSet(name) {
			return true
		}
	}
	return false
}

// required returns an error naming the flags of names that are not given, when some are.
func required(cmd *cli.Command, names ...string) error {
	var set, missing []string
	for _, n := range names {
		if cmd.IsSet(n) && (cmd.String(n) != "" || len(cmd.StringSlice(n)) > 0) {
			set = append(set, "--"+n)
		} else {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	verb := map[bool]string{true: "is", false: "are"}
	given := "some of its flags are set"
	if len(set) > 0 {
		given = strings.Join(set, ", ") + " " + verb[len(set) == 1] + " set"
	}
	channel, _, _ := strings.Cut(names[0], "-")
	return fmt.Errorf("the %s channel is half configured: %s, so %s %s required too", channel, given,
		strings.Join(missing, ", "), verb[len(missing) == 1])
}

// flagValue returns v, or the contents of file path when v is @path.
func flagValue(v string) (string, error) {
	if path, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the key file on the command line
		if err != nil {
			return "", err
		}
		return string(b), nil
	}
	return v, nil
}

// keyFlag parses the key of flag name (PEM, base64 DER or @file). Its errors never include
// the key.
func keyFlag[K *rsa.PrivateKey | *rsa.PublicKey](cmd *cli.Command, name string, parse func([]byte) (K, error)) (K, error) {
	v, err := flagValue(cmd.String(name))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", name, err)
	}
	k, err := parse([]byte(v))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", name, err)
	}
	return k, nil
}

// platformKeys reads --wechat-platform-key values: SERIAL=FILE (a certificate or a public
// key, under SERIAL) or FILE (a platform certificate, under its own serial).
func platformKeys(values []string) (map[string]*rsa.PublicKey, error) {
	keys := map[string]*rsa.PublicKey{}
	for _, v := range values {
		for item := range strings.SplitSeq(v, ",") {
			if item = strings.TrimSpace(item); item == "" {
				continue
			}
			serial, path, named := strings.Cut(item, "=")
			if !named {
				path = serial
			}
			b, err := os.ReadFile(strings.TrimPrefix(path, "@"))
			if err != nil {
				return nil, fmt.Errorf("--wechat-platform-key: %w", err)
			}
			if !named {
				s, k, err := wechatpay.PlatformCertificate(b)
				if err != nil {
					return nil, fmt.Errorf("--wechat-platform-key %s: %w (give SERIAL=FILE for a public key)", path, err)
				}
				keys[s] = k
				continue
			}
			k, err := channel.ParseRSAPublicKey(b)
			if err != nil {
				return nil, fmt.Errorf("--wechat-platform-key %s: %w", serial, err)
			}
			keys[serial] = k
		}
	}
	return keys, nil
}
