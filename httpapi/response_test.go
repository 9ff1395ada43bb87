package httpapi

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
)

// TestResponsesMirrorDomainTypes keeps the response bodies in step with the root package's
// types: for a value with every field set, the response has the same JSON members with the
// same values, times cut to milliseconds. A new field in a domain type fails this test
// until the fixture below sets it and the response struct carries it.
func TestResponsesMirrorDomainTypes(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Date(2026, 11, 30, 7, 33, 7, ms*1000000+456789, time.UTC) }
	atp := func(ms int) *time.Time { v := at(ms); return &v }

	order := &orderly.Order{
		ID: "ord_1", UserID: "u_1", Flow: "standard", State: orderly.StatePaid, PayStatus: orderly.PayPaid,
		Items: []orderly.Item{{SKU: "a", Quantity: 1, UnitPrice: 2}}, Amount: 2, Currency: "EUR", CouponID: "c_1",
		CurrentPaymentID: "pay_1", CreatedAt: at(1), ExpiresAt: at(2), CloseAt: at(3), ClosedAt: atp(4),
		CloseReason: orderly.CloseReasonPaymentTimeout, PaidAt: atp(5), RefundedAmount: 1, Version: 3,
		Metadata: orderly.Metadata{"cart_id": "c_1"},
	}
	transition := &orderly.Transition{
		ID: 1, OrderID: "ord_1", From: orderly.StatePendingPayment, To: orderly.StatePaid, Event: orderly.EventPay,
		PayStatusFrom: orderly.PayPaying, PayStatusTo: orderly.PayPaid, Cause: "pay_1", Actor: "payment", At: at(6), TraceID: "t",
	}
	pay := &orderly.Payment{
		ID: "pay_1", OrderID: "ord_1", Attempt: 2, Channel: "stripe", Variant: "v2", ChannelTxnID: "txn", Amount: 2, Currency: "EUR",
		State: orderly.PaymentRefunded, FailReason: "x", CreatedAt: at(7), SucceededAt: atp(8), RefundedAt: atp(9),
		DuplicateOf: "pay_0", ProviderRef: "pi_1", PayerID: "openid_1",
		NextAction: &orderly.NextAction{Type: orderly.NextActionStripeSDK, ClientSecret: "pi_1_secret_x"},
		Metadata:   orderly.Metadata{"k": "v"},
	}
	refusal := &orderly.CallbackRefusal{
		ID: 7, PaymentID: "pay_1", OrderID: "ord_2", Reason: orderly.RefusalOrderMismatch, Detail: "d",
		Status: orderly.CallbackSucceeded, Amount: 2, Currency: "EUR", ChannelTxnID: "txn", Body: "{}", CreatedAt: at(12),
	}
	coupon := &orderly.Coupon{
		ID: "c_1", UserID: "u_1", AmountOff: 1, Currency: "EUR", State: orderly.CouponUsed, OrderID: "ord_1",
		ExpiresAt: atp(10), CreatedAt: at(11),
	}
	refund := &orderly.Refund{
		ID: "ref_1", OrderID: "ord_1", PaymentID: "pay_1", Amount: 1, Currency: "EUR",
		Items: []orderly.RefundItem{{SKU: "a", Quantity: 1}}, Restock: true, Reason: "return",
		State: orderly.RefundFailed, FailReason: "refused", CreatedAt: at(12), CompletedAt: atp(13),
		ProviderRef: "re_1", ProviderStatus: "pending", Metadata: orderly.Metadata{"rma": "R-1"},
	}
	tests := []struct {
		name     string
		domain   any
		response any
	}{
		{"Refund", refund, newRefundResponse(refund)},
		{"Order", order, newOrderResponse(order)},
		{"Transition", transition, newTransitionResponse(transition)},
		{"Payment", pay, newPaymentResponse(pay)},
		{"Coupon", coupon, newCouponResponse(coupon)},
		{"CallbackRefusal", refusal, newRefusalResponse(refusal)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := reflect.ValueOf(tt.domain).Elem()
			for i := range v.NumField() {
				if v.Field(i).IsZero() {
					t.Errorf("fixture leaves %s.%s unset: set it so that the test covers it", tt.name, v.Type().Field(i).Name)
				}
			}
			want, got := jsonObject(t, tt.domain), jsonObject(t, tt.response)
			if !slices.Equal(sortedKeys(got), sortedKeys(want)) {
				t.Fatalf("response members %v, domain members %v", sortedKeys(got), sortedKeys(want))
			}
			for k, w := range want {
				g := got[k]
				if ws, ok := w.(string); ok {
					if wt, err := time.Parse(time.RFC3339Nano, ws); err == nil {
						w = wt.Truncate(time.Millisecond).Format(TimeLayout)
					}
				}
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s = %v, want %v", k, g, w)
				}
			}
		})
	}
}

func jsonObject(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestRequestsMirrorDomainTypes keeps the request structs that exist only to name fields
// in time errors in step with the root package's types they stand for.
func TestRequestsMirrorDomainTypes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		request any
		domain  any
	}{
		{"callback", callbackRequest{}, orderly.Callback{}},
		{"coupon", couponRequest{}, orderly.CreateCouponParams{}},
	}
	for _, tt := range tests {
		got, want := jsonFieldNames(reflect.TypeOf(tt.request)), jsonFieldNames(reflect.TypeOf(tt.domain))
		if !slices.Equal(got, want) {
			t.Errorf("%s: request fields %v, domain fields %v", tt.name, got, want)
		}
	}
}

// jsonFieldNames returns the JSON member names of struct type t, sorted; fields tagged "-"
// are skipped.
func jsonFieldNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
