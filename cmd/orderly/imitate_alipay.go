package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
)

// imitateAlipay serves an imitation of Alipay (package alipaytest: the OpenAPI gateway,
// page and wap pay URLs, the cashier where the buyer pays, refund plays) on addr
// ("127.0.0.1:9010"; port 0 picks one) until ctx is done, and sends the async
// notifications of trades to orderlyURL + "/v1/channels/alipay/webhook" (the notify_url
// orderly sends, or the default when it sends none). It first writes the test-only key
// pair to a new temporary directory (removed on return) and prints to w the `orderly
// serve` flags that point orderly's alipay channel at the imitation, and the curl lines
// of the buyer's scan and of the refund plays. The keys are public test keys: what they
// sign is worthless outside tests. Errors: addr cannot be listened on, the key files
// cannot be written.
func imitateAlipay(ctx context.Context, w io.Writer, addr, orderlyURL string) error {
	srv, err := alipaytest.NewServerAt(addr)
	if err != nil {
		return err
	}
	defer srv.Close()
	notify := strings.TrimRight(orderlyURL, "/") + alipaytest.WebhookPath
	srv.DefaultNotifyURL = notify
	dir, err := os.MkdirTemp("", "orderly-alipay-imitation-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	priv, err := x509.MarshalPKCS8PrivateKey(alipaytest.MerchantKey())
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&alipaytest.AlipayKey().PublicKey)
	if err != nil {
		return err
	}
	paths, err := writeFiles(dir, map[string][]byte{
		"app_private_key.pem":   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}),
		"alipay_public_key.pem": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
	})
	if err != nil {
		return err
	}
	privFile, pubFile := paths["app_private_key.pem"], paths["alipay_public_key.pem"]
	base := srv.BaseURL()
	fmt.Fprintf(w, "Alipay imitation on %s (OpenAPI gateway %s), notifying %s\n", base, srv.URL, notify)
	fmt.Fprintf(w, "Test-only keys (public, worthless outside tests) in %s\n\n", dir)
	fmt.Fprintf(w, "Start orderly with (orders in CNY):\n  orderly serve --alipay-app-id %s --alipay-seller-id %s --alipay-private-key @%s --alipay-public-key @%s --alipay-api-url %s --alipay-notify-url %s --default-channel alipay\n\n",
		alipaytest.AppID, alipaytest.SellerID, privFile, pubFile, srv.URL, notify)
	fmt.Fprintf(w, "The buyer scans and pays (QR_CODE is next_action.qr_code of POST /v1/orders/{id}/payments {\"channel\":\"alipay\"}, %s/qr/…):\n  curl -X POST \"$QR_CODE\"\n\n", base)
	fmt.Fprintf(w, "Refunds accepted without money (fund_change N), then carried out or failed (REFUND_ID is the id POST /v1/orders/{id}/refunds answers, which orderly sends as out_request_no):\n")
	fmt.Fprintf(w, "  curl -X POST '%s/imitation/refund-mode?mode=deferred'\n", base)
	fmt.Fprintf(w, "  curl -X POST \"%s/imitation/refunds/settle?out_trade_no=$PROVIDER_REF&out_request_no=$REFUND_ID\"\n", base)
	fmt.Fprintf(w, "  curl -X POST \"%s/imitation/refunds/fail?out_trade_no=$PROVIDER_REF&out_request_no=$REFUND_ID&sub_code=ACQ.SELLER_BALANCE_NOT_ENOUGH\"\n", base)
	<-ctx.Done()
	return nil
}
