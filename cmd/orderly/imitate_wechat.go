package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

// imitateWeChat serves the WeChat Pay imitation (package wechatpaytest) on addr until ctx
// is done, for an `orderly serve` at orderlyURL to use as its wechat channel: the
// imitation sends its notifications itself to the notify URL each order names, which the
// printed --wechat-notify-url makes orderlyURL + "/v1/channels/wechat/webhook". It first
// writes the imitation's test-only keys to a new temporary directory (removed on return)
// and prints to w the `orderly serve` flags that use them, then a curl line per handoff for
// the buyer's client step (PayPath), and the curl lines of the refund plays
// (RefundHoldPath, RefundSettlePath). Errors: addr cannot be listened on, the key files
// cannot be written.
func imitateWeChat(ctx context.Context, w io.Writer, addr, orderlyURL string) error {
	srv, err := wechatpaytest.Listen(addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	srv.Notify(nil)
	dir, err := os.MkdirTemp("", "orderly-wechat-imitation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files, err := writeWeChatKeys(dir)
	if err != nil {
		return err
	}
	notify := strings.TrimSuffix(orderlyURL, "/") + wechatpaytest.WebhookPath
	fmt.Fprintf(w, "WeChat Pay imitation at %s (test-only keys in %s; notifications go to %s)\n\n", srv.URL, dir, notify)
	fmt.Fprintf(w, "orderly serve \\\n  --wechat-mch-id %s \\\n  --wechat-app-id %s \\\n", wechatpaytest.MchID, wechatpaytest.AppID)
	fmt.Fprintf(w, "  --wechat-merchant-key @%s \\\n  --wechat-merchant-serial %s \\\n", files["merchant"], wechatpaytest.MerchantSerial)
	fmt.Fprintf(w, "  --wechat-apiv3-key @%s \\\n", files["apiv3"])
	fmt.Fprintf(w, "  --wechat-platform-key %s=%s \\\n", wechatpaytest.PlatformSerial, files["platform"])
	fmt.Fprintf(w, "  --wechat-platform-key %s=%s \\\n", wechatpaytest.PublicKeyID, files["pubkey"])
	fmt.Fprintf(w, "  --wechat-api-url %s \\\n  --wechat-notify-url %s \\\n  --default-channel wechat\n\n", srv.URL, notify)
	fmt.Fprintf(w, "The buyer pays a Native payment (next_action.qr_code):\n")
	fmt.Fprintf(w, "curl -s -X POST %s%s -H 'Content-Type: application/json' -d '{\"code_url\":\"<next_action.qr_code>\"}'\n", srv.URL, wechatpaytest.PayPath)
	fmt.Fprintf(w, "or a JSAPI payment (payer_id set; next_action.wechat_jsapi, openid the payer's):\n")
	fmt.Fprintf(w, "curl -s -X POST %s%s -H 'Content-Type: application/json' -d '<next_action.wechat_jsapi with \"openid\":\"<payer_id>\" added as one more member>'\n", srv.URL, wechatpaytest.PayPath)
	fmt.Fprintf(w, "\nRefunds (REFUND_ID is the id POST /v1/orders/{id}/refunds answers, which orderly sends as out_refund_no):\n")
	fmt.Fprintf(w, "hold new refunds in PROCESSING (as to a bank card) instead of ending them SUCCESS at once:\n")
	fmt.Fprintf(w, "curl -s -X POST '%s%s?on=true'\n", srv.URL, wechatpaytest.RefundHoldPath)
	fmt.Fprintf(w, "then end a held refund SUCCESS, CLOSED (no money moved) or ABNORMAL (the buyer's account refused it; settle it again later):\n")
	fmt.Fprintf(w, "curl -s -X POST \"%s%s?out_refund_no=$REFUND_ID&status=SUCCESS\"\n", srv.URL, wechatpaytest.RefundSettlePath)
	<-ctx.Done()
	return nil
}

// writeWeChatKeys writes the imitation's test-only keys to dir: the merchant private key
// (PKCS#8 PEM), the APIv3 key, the platform certificate and the WeChat Pay public key
// (PKIX PEM); it returns their paths by "merchant", "apiv3", "platform", "pubkey".
func writeWeChatKeys(dir string) (map[string]string, error) {
	merchant, err := x509.MarshalPKCS8PrivateKey(wechatpaytest.MerchantKey())
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&wechatpaytest.PublicKeyKey().PublicKey)
	if err != nil {
		return nil, err
	}
	paths, err := writeFiles(dir, map[string][]byte{
		"apiclient_key.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: merchant}),
		"apiv3_key":         []byte(wechatpaytest.APIv3Key),
		"platform_cert.pem": wechatpaytest.PlatformCertificatePEM(),
		"pub_key.pem":       pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	})
	return map[string]string{"merchant": paths["apiclient_key.pem"], "apiv3": paths["apiv3_key"],
		"platform": paths["platform_cert.pem"], "pubkey": paths["pub_key.pem"]}, err
}
