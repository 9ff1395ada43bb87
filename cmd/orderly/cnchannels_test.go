package main

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
)

// writePEM writes der as a PEM block of kind typ to a file of dir and returns its path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pkcs8(t *testing.T, k *rsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func pkix(t *testing.T, k *rsa.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// adaptersOf parses serve's channel flags args and returns the adapters they turn on.
func adaptersOf(t *testing.T, args ...string) ([]channel.Adapter, error) {
	t.Helper()
	var out []channel.Adapter
	var cerr error
	cmd := &cli.Command{Name: "serve", Flags: serveFlags(), Action: func(_ context.Context, cmd *cli.Command) error {
		out, cerr = channels(cmd)
		return nil
	}}
	if err := cmd.Run(t.Context(), append([]string{"serve"}, args...)); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return out, cerr
}

// TestServeChannelFlags: the --alipay-* and --wechat-* flags build adapters with the keys
// they name (PEM, bare base64, @file; a platform certificate by its own serial and the
// WeChat Pay public key by its id), proved by verifying a notification each imitation
// signs with the matching keys.
func TestServeChannelFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ali := alipaytest.NewServer()
	t.Cleanup(ali.Close)
	wx := wechatpaytest.NewServer()
	t.Cleanup(wx.Close)
	certPath := filepath.Join(dir, "platform_cert.pem")
	if err := os.WriteFile(certPath, wechatpaytest.PlatformCertificatePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--alipay-app-id", alipaytest.AppID, "--alipay-seller-id", alipaytest.SellerID,
		"--alipay-private-key", "@" + writePEM(t, dir, "app.pem", "PRIVATE KEY", pkcs8(t, alipaytest.MerchantKey())),
		// The Alipay console shows the Alipay public key as bare base64.
		"--alipay-public-key", base64.StdEncoding.EncodeToString(pkix(t, &alipaytest.AlipayKey().PublicKey)),
		"--wechat-mch-id", wechatpaytest.MchID, "--wechat-app-id", wechatpaytest.AppID,
		"--wechat-merchant-key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(t, wechatpaytest.MerchantKey())})),
		"--wechat-merchant-serial", wechatpaytest.MerchantSerial, "--wechat-apiv3-key", wechatpaytest.APIv3Key,
		"--wechat-platform-key", certPath,
		"--wechat-platform-key", wechatpaytest.PublicKeyID + "=" + writePEM(t, dir, "pub.pem", "PUBLIC KEY", pkix(t, &wechatpaytest.PublicKeyKey().PublicKey)),
		"--wechat-notify-url", "https://shop.example/v1/channels/wechat/webhook",
	}
	adapters, err := adaptersOf(t, args...)
	if err != nil || len(adapters) != 2 || adapters[0].Name() != "alipay" || adapters[1].Name() != "wechat" {
		t.Fatalf("adapters %v, %v; want alipay and wechat", adapters, err)
	}

	if _, err := ali.Pay("01alipay", 1000); err != nil {
		t.Fatal(err)
	}
	body, err := ali.PaymentNotification("01alipay")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := adapters[0].Verify(nil, body, time.Now()); err != nil || n.PaymentID != "01alipay" || n.Amount != 1000 {
		t.Errorf("alipay Verify: %+v, %v; want payment 01alipay of 1000", n, err)
	}

	if _, err := wx.Pay("01wechat", 0); err != nil {
		t.Fatal(err)
	}
	for _, usePublicKey := range []bool{false, true} {
		wx.UsePublicKey = usePublicKey
		h, body, err := wx.TransactionNotification("01wechat", wechatpaytest.NotifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := adapters[1].Verify(h, body, wx.Now()); err != nil || n.PaymentID != "01wechat" {
			t.Errorf("wechat Verify (public key %v): %+v, %v; want payment 01wechat", usePublicKey, n, err)
		}
	}
}

// TestServeChannelFlagErrors: a channel given only some of its flags, or a key that does
// not parse, is a usage error (exit 2) that names the flags, before anything starts; a
// key's value never appears in it.
func TestServeChannelFlagErrors(t *testing.T) {
	t.Parallel()
	secret := "c2VjcmV0LWtleS1tYXRlcmlhbA-not-base64"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stripe-webhook-secret", "whsec_x"}, "the stripe channel is half configured: --stripe-webhook-secret is set, so --stripe-api-key is required too"},
		{[]string{"--stripe-api-key", "sk_test_x"}, "the stripe channel is half configured: --stripe-api-key is set, so --stripe-webhook-secret is required too"},
		{[]string{"--stripe-api-key", "pk_test_x", "--stripe-webhook-secret", "whsec_x"}, "--stripe-api-key must be a secret key (sk_…) or a restricted key (rk_…), not a publishable key or another value"},
		{[]string{"--stripe-api-key", "sk_test_x", "--stripe-webhook-secret", "whsec_x,wh_y"}, "--stripe-webhook-secret must be the endpoint's signing secret (whsec_…), comma-separated while rolling it"},
		{[]string{"--stripe-api-key", "sk_test_x", "--stripe-webhook-secret", "whsec_x", "--stripe-api-url", "ht!tp://bad"}, "--stripe-api-url must be an http or https URL, e.g. https://api.stripe.com"},
		{[]string{"--alipay-app-id", "2021"}, "the alipay channel is half configured: --alipay-app-id is set, so --alipay-seller-id, --alipay-private-key, --alipay-public-key are required too"},
		{[]string{"--alipay-api-url", "https://openapi-sandbox.dl.alipaydev.com/gateway.do"}, "the alipay channel is half configured: some of its flags are set, so --alipay-app-id, --alipay-seller-id, --alipay-private-key, --alipay-public-key are required too"},
		{[]string{"--alipay-app-id", "2021", "--alipay-seller-id", "2088", "--alipay-private-key", secret, "--alipay-public-key", secret},
			"--alipay-private-key: private key: neither PEM nor base64 DER"},
		{[]string{"--alipay-app-id", "2021", "--alipay-seller-id", "2088", "--alipay-private-key", secret, "--alipay-public-key", secret,
			"--alipay-pay-mode", "bank"}, `--alipay-pay-mode must be qr, page or wap, not "bank"`},
		{[]string{"--wechat-mch-id", "1900", "--wechat-app-id", "wx", "--wechat-merchant-key", secret, "--wechat-merchant-serial", "37",
			"--wechat-apiv3-key", "short", "--wechat-platform-key", "x.pem"}, "the wechat channel is half configured: --wechat-mch-id, --wechat-app-id, --wechat-merchant-key, --wechat-merchant-serial, --wechat-apiv3-key, --wechat-platform-key are set, so --wechat-notify-url is required too"},
		{[]string{"--wechat-mch-id", "1900", "--wechat-app-id", "wx", "--wechat-merchant-key", secret, "--wechat-merchant-serial", "37",
			"--wechat-apiv3-key", "short", "--wechat-platform-key", "x.pem", "--wechat-notify-url", "https://shop.example/n"}, "--wechat-merchant-key: private key: neither PEM nor base64 DER"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--database-url", t.TempDir() + "/x.db"}, tc.args...)...)
		if code != exitUsage || stdout != "" || stderr != "orderly: "+tc.want+"\n" || strings.Contains(stderr, secret) {
			t.Errorf("serve %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
}
