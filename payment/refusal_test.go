package payment_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// TestRefusedCallbacksLeaveATrace: every refusal of a callback is counted by reason, and
// stored with what the callback said, so that money a provider says it took and we did not
// apply is visible; the refused callback changes nothing.
func TestRefusedCallbacksLeaveATrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{UnitPrice: 3000})
	other := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	at := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	cb := func(paymentID, orderID string, amount int64, currency, status string) *orderly.Callback {
		return &orderly.Callback{PaymentID: paymentID, OrderID: orderID, ChannelTxnID: "txn-x", Amount: amount,
			Currency: currency, Status: status, OccurredAt: at}
	}
	for _, tc := range []struct {
		name   string
		cb     *orderly.Callback
		code   string
		reason string
	}{
		{"unknown payment", cb("nope", o.ID, 3000, "USD", "succeeded"), orderly.ENOTFOUND, orderly.RefusalUnknownPayment},
		{"payment of another order", cb(p.ID, other.ID, 3000, "USD", "succeeded"), orderly.EORDERMISMATCH, orderly.RefusalOrderMismatch},
		{"amount", cb(p.ID, o.ID, 1, "USD", "succeeded"), orderly.EAMOUNTMISMATCH, orderly.RefusalAmountMismatch},
		{"currency", cb(p.ID, o.ID, 3000, "EUR", "succeeded"), orderly.EAMOUNTMISMATCH, orderly.RefusalCurrencyMismatch},
		{"currency of a failure", cb(p.ID, o.ID, 0, "EUR", "failed"), orderly.EAMOUNTMISMATCH, orderly.RefusalCurrencyMismatch},
		{"status", cb(p.ID, o.ID, 3000, "USD", "maybe"), orderly.EINVALID, orderly.RefusalInvalidStatus},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(e.Metrics.CallbackRefusals.WithLabelValues(tc.reason))
			_, herr := e.Payments.HandleCallback(ctx, tc.cb)
			if orderly.ErrorCode(herr) != tc.code {
				t.Fatalf("error %v, want %s", herr, tc.code)
			}
			if n := testutil.ToFloat64(e.Metrics.CallbackRefusals.WithLabelValues(tc.reason)) - before; n != 1 {
				t.Errorf("orderly_payment_callback_refusals_total{reason=%q} grew by %v, want 1", tc.reason, n)
			}
			rs, err := e.Payments.CallbackRefusals(ctx, tc.cb.PaymentID)
			if err != nil || len(rs) == 0 {
				t.Fatalf("refusals of %s = %v, %v", tc.cb.PaymentID, rs, err)
			}
			r := rs[len(rs)-1]
			var body orderly.Callback
			if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
				t.Fatalf("stored body %q: %v", r.Body, err)
			}
			body.OccurredAt = body.OccurredAt.UTC()
			if r.ID <= 0 || r.PaymentID != tc.cb.PaymentID || r.OrderID != tc.cb.OrderID || r.Reason != tc.reason ||
				r.Detail != orderly.ErrorMessage(herr) || r.Status != tc.cb.Status || r.Amount != tc.cb.Amount ||
				r.Currency != tc.cb.Currency || r.ChannelTxnID != "txn-x" || !r.CreatedAt.Equal(enginetest.Start) || !reflect.DeepEqual(&body, tc.cb) {
				t.Errorf("stored refusal %+v, want the callback %+v refused for %s", r, tc.cb, tc.reason)
			}
		})
	}
	for status, want := range map[string]float64{orderly.CallbackSucceeded: 4, orderly.CallbackFailed: 1, "invalid": 1} {
		if n := testutil.ToFloat64(e.Metrics.Callbacks.WithLabelValues(status, "refused")); n != want {
			t.Errorf("orderly_payment_callbacks_total{status=%q,result=refused} = %v, want %v", status, n, want)
		}
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
		t.Fatalf("refused callbacks changed the order: %s/%s", got.State, got.PayStatus)
	}
	if pay, _ := e.Payments.Payment(ctx, p.ID); pay.State != orderly.PaymentInitiated {
		t.Fatalf("refused callbacks changed the payment: %s", pay.State)
	}
	// The raw body is kept when the caller has it; an unknown reason is kept as invalid_input.
	raw := []byte(`{"payment_id":"raw-1","amount":"12"}`)
	e.Payments.RefuseCallback(ctx, &orderly.Callback{PaymentID: "raw-1", Body: raw}, "no_such_reason", orderly.Errorf(orderly.EINVALID, "amount: must be a number"))
	rs, err := e.Payments.CallbackRefusals(ctx, "raw-1")
	if err != nil || len(rs) != 1 || rs[0].Body != string(raw) || rs[0].Reason != orderly.RefusalInvalidInput || rs[0].Detail != "amount: must be a number" {
		t.Fatalf("refusals of raw-1 = %+v, %v", rs, err)
	}
	if rs, err := e.Payments.CallbackRefusals(ctx, "never-named"); err != nil || len(rs) != 0 {
		t.Fatalf("refusals of a payment id no callback named = %+v, %v; want none", rs, err)
	}
}
