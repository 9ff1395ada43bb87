package wechatpay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
)

// TestRetryClosesPreviousAttempt: WeChat Pay never notifies a failed payment, so when the
// buyer starts a new attempt the payment service closes the order's attempt in flight at
// WeChat Pay first (payment.Service.StartPayment, docs/payments/index.md,
// "A new attempt closes the previous one"). The adapter is one of the engine's Channels, as serve configures it.
func TestRetryClosesPreviousAttempt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// play happens at WeChat Pay to the first attempt before the retry.
		play func(t *testing.T, srv *wechatpaytest.Server, paymentID string)
		// wantCode is the retry's error code; "" means the retry starts an attempt.
		wantCode            string
		wantFirst           orderly.PaymentState
		wantOrder           orderly.State
		wantPay             orderly.PayStatus
		wantFirstAtWeChat   string
		wantCreatedAtWeChat int
	}{
		{name: "failed at WeChat Pay, not notified", play: func(t *testing.T, srv *wechatpaytest.Server, id string) {
			if _, _, _, err := srv.Webhook(id, orderly.CallbackFailed); !errors.Is(err, wechatpaytest.ErrNotNotified) {
				t.Fatalf("Webhook(failed): %v, want ErrNotNotified", err)
			}
		}, wantFirst: orderly.PaymentFailed, wantOrder: orderly.StatePendingPayment, wantPay: orderly.PayPaying,
			wantFirstAtWeChat: "CLOSED", wantCreatedAtWeChat: 2},
		{name: "abandoned (NOTPAY)", play: func(*testing.T, *wechatpaytest.Server, string) {},
			wantFirst: orderly.PaymentFailed, wantOrder: orderly.StatePendingPayment, wantPay: orderly.PayPaying,
			wantFirstAtWeChat: "CLOSED", wantCreatedAtWeChat: 2},
		{name: "paid, notification not yet arrived", play: func(t *testing.T, srv *wechatpaytest.Server, id string) {
			if _, err := srv.Pay(id, 0); err != nil {
				t.Fatal(err)
			}
		}, wantCode: orderly.ENOTPAYABLE, wantFirst: orderly.PaymentSucceeded, wantOrder: orderly.StatePaid, wantPay: orderly.PayPaid,
			wantFirstAtWeChat: "SUCCESS", wantCreatedAtWeChat: 1},
		{name: "close unanswered", play: func(_ *testing.T, srv *wechatpaytest.Server, _ string) {
			srv.FailNext("close", 1)
		}, wantCode: orderly.EUNAVAILABLE, wantFirst: orderly.PaymentInitiated, wantOrder: orderly.StatePendingPayment,
			wantPay: orderly.PayPaying, wantFirstAtWeChat: "NOTPAY", wantCreatedAtWeChat: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			srv := wechatpaytest.NewServer()
			t.Cleanup(srv.Close)
			cfg := srv.Config()
			cfg.NotifyURL = "https://shop.example/v1/channels/wechat/webhook"
			a, err := wechatpay.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			e, err := engine.Open(ctx, engine.Config{
				DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
				Channels: []channel.Adapter{a}, DefaultChannel: wechatpay.Name,
			}, features.All()...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(context.WithoutCancel(ctx)) })
			if _, err := e.Orders().SetStock(ctx, "SKU-1", 10); err != nil {
				t.Fatal(err)
			}
			o, _, err := e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Currency: "CNY", PaymentTimeoutSeconds: 600,
				Items: []orderly.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000}}})
			if err != nil {
				t.Fatal(err)
			}
			first, err := e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
			if err != nil {
				t.Fatal(err)
			}
			tc.play(t, srv, first.ID)

			second, err := e.Payments().StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
			if got := orderly.ErrorCode(err); (tc.wantCode == "" && err != nil) || (tc.wantCode != "" && got != tc.wantCode) {
				t.Fatalf("retry: %v (code %q), want code %q", err, got, tc.wantCode)
			}
			p1, err := e.Payments().Payment(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if p1.State != tc.wantFirst {
				t.Errorf("first attempt %s, want %s", p1.State, tc.wantFirst)
			}
			if tc.wantFirst == orderly.PaymentFailed && p1.FailReason != "superseded: closed at the provider" {
				t.Errorf("first attempt's fail reason %q", p1.FailReason)
			}
			got, err := e.Orders().Order(ctx, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tc.wantOrder || got.PayStatus != tc.wantPay {
				t.Errorf("order %s/%s, want %s/%s", got.State, got.PayStatus, tc.wantOrder, tc.wantPay)
			}
			wantCurrent := first.ID
			if second != nil {
				wantCurrent = second.ID
				if wo, ok := srv.Order(second.ID); !ok || wo.State != "NOTPAY" || wo.Total != 1000 {
					t.Errorf("second attempt at WeChat Pay: %+v, %v; want NOTPAY of 1000", wo, ok)
				}
			}
			if got.CurrentPaymentID != wantCurrent {
				t.Errorf("current payment %s, want %s", got.CurrentPaymentID, wantCurrent)
			}
			if wo, ok := srv.Order(first.ID); !ok || wo.State != tc.wantFirstAtWeChat {
				t.Errorf("first attempt at WeChat Pay: %+v, %v; want %s", wo, ok, tc.wantFirstAtWeChat)
			}
			natives := 0
			for _, c := range srv.Calls() {
				if c.Method == "native" {
					natives++
				}
			}
			if natives != tc.wantCreatedAtWeChat {
				t.Errorf("orders created at WeChat Pay: %d, want %d", natives, tc.wantCreatedAtWeChat)
			}
		})
	}
}
