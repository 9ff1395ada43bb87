package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testPayments checks payment attempts: numbering, round trips, the unique gateway
// transaction id and the guarded state change (I3).
func testPayments(t *testing.T, open opener) {
	t.Run("InsertAssignsAttempts", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		insertOrder(t, s, &orderOpts{ID: "o2"})
		var o1 []*orderly.Payment
		for i := range 3 {
			p := insertPayment(t, s, &paymentOpts{OrderID: "o1", Attempt: 99, CreatedAt: t0.Add(time.Duration(i) * time.Second)})
			if p.Attempt != int64(i+1) {
				t.Errorf("attempt %d of o1 numbered %d", i+1, p.Attempt)
			}
			o1 = append(o1, p)
		}
		q := insertPayment(t, s, &paymentOpts{OrderID: "o2", CreatedAt: t0.Add(3 * time.Second)})
		if q.Attempt != 1 {
			t.Errorf("first attempt of o2 numbered %d, want 1 (attempts count per order)", q.Attempt)
		}
		for _, p := range append(o1, q) {
			equal(t, "PaymentGet("+p.ID+")", getPayment(t, s, p.ID), p)
		}
		equal(t, "PaymentList(o1), oldest first",
			read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) { return tx.PaymentList(ctx, "o1") }), o1)
		equal(t, "PaymentList(all), oldest first",
			read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) { return tx.PaymentList(ctx, "") }), append(o1, q))
		equal(t, "PaymentList(missing)",
			len(read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) { return tx.PaymentList(ctx, "missing") })), 0)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		zone := time.FixedZone("UTC+9", 9*60*60)
		in := newPayment(&paymentOpts{ID: "p1", OrderID: "o1", Channel: "stripe", Variant: "v2", ChannelTxnID: "txn-1", Amount: 12_345,
			Currency: "JPY", State: orderly.PaymentRefunded, FailReason: "none",
			CreatedAt:   time.Date(2030, 1, 2, 3, 4, 5, 6_789_999, zone),
			SucceededAt: ptr(time.Date(2030, 1, 2, 3, 5, 0, 999_999_999, zone)),
			RefundedAt:  ptr(time.Date(2030, 1, 3, 0, 0, 0, 1_000_000, zone))})
		inTx(t, s, func(tx store.Tx) error { return tx.PaymentInsert(ctx, in) })
		want := *in
		want.Attempt = 1
		want.CreatedAt, want.SucceededAt, want.RefundedAt = utcMS(in.CreatedAt), ptr(utcMS(*in.SucceededAt)), ptr(utcMS(*in.RefundedAt))
		got := getPayment(t, s, "p1")
		equal(t, "PaymentGet(p1)", got, &want)
		if got.CreatedAt.Location() != time.UTC || got.SucceededAt.Location() != time.UTC || got.RefundedAt.Location() != time.UTC {
			t.Errorf("payment times not UTC: %+v", got)
		}

		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.PaymentGet(ctx, "missing"); return err })
		wantCode(t, "PaymentGet(missing)", err, orderly.ENOTFOUND)
		err = txErr(t, s, func(tx store.Tx) error {
			return tx.PaymentInsert(ctx, newPayment(&paymentOpts{ID: "p1", OrderID: "o1"}))
		})
		wantCode(t, "second insert of p1", err, orderly.ECONFLICT)
		equal(t, "p1 after the duplicate insert", getPayment(t, s, "p1"), &want)
	})

	t.Run("ChannelTxnIDUnique", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		insertOrder(t, s, &orderOpts{ID: "o2"})
		p1 := insertPayment(t, s, &paymentOpts{ID: "p1", OrderID: "o1", ChannelTxnID: "txn-1", State: orderly.PaymentSucceeded})
		// Attempts without a gateway transaction id do not collide.
		p2 := insertPayment(t, s, &paymentOpts{ID: "p2", OrderID: "o1"})
		p3 := insertPayment(t, s, &paymentOpts{ID: "p3", OrderID: "o2"})

		err := txErr(t, s, func(tx store.Tx) error {
			return tx.PaymentInsert(ctx, newPayment(&paymentOpts{ID: "p4", OrderID: "o2", ChannelTxnID: "txn-1"}))
		})
		wantCode(t, "insert with a used channel_txn_id", err, orderly.ECONFLICT)
		err = s.Read(ctx, func(tx store.Tx) error { _, err := tx.PaymentGet(ctx, "p4"); return err })
		wantCode(t, "p4 after the conflict", err, orderly.ENOTFOUND)

		err = txErr(t, s, func(tx store.Tx) error {
			_, err := tx.PaymentSetState(ctx, &store.PaymentSetStateParams{ID: "p3",
				From: []orderly.PaymentState{orderly.PaymentInitiated}, To: orderly.PaymentSucceeded,
				ChannelTxnID: "txn-1", SucceededAt: &t0})
			return err
		})
		wantCode(t, "success with a used channel_txn_id", err, orderly.ECONFLICT)
		for _, p := range []*orderly.Payment{p1, p2, p3} {
			equal(t, p.ID+" after the conflicts", getPayment(t, s, p.ID), p)
		}
	})

	t.Run("ExtraCaptureAndLookupByChannelTxnID", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		p1 := insertPayment(t, s, &paymentOpts{ID: "p1", OrderID: "o1", ChannelTxnID: "txn-1", State: orderly.PaymentSucceeded,
			SucceededAt: ptr(t0)})
		dup := newPayment(&paymentOpts{ID: "p1-dup", OrderID: "o1", ChannelTxnID: "txn-2", State: orderly.PaymentRefundPending,
			SucceededAt: ptr(t0.Add(time.Minute))})
		dup.DuplicateOf = "p1"
		inTx(t, s, func(tx store.Tx) error { return tx.PaymentInsert(ctx, dup) })
		if dup.Attempt != 2 {
			t.Errorf("extra capture numbered %d, want 2", dup.Attempt)
		}
		equal(t, "PaymentGet(p1-dup)", getPayment(t, s, "p1-dup"), dup)
		equal(t, "PaymentGetByChannelTxnID(txn-1)",
			read(t, s, func(tx store.Tx) (*orderly.Payment, error) { return tx.PaymentGetByChannelTxnID(ctx, "txn-1") }), p1)
		equal(t, "PaymentGetByChannelTxnID(txn-2)",
			read(t, s, func(tx store.Tx) (*orderly.Payment, error) { return tx.PaymentGetByChannelTxnID(ctx, "txn-2") }), dup)
		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.PaymentGetByChannelTxnID(ctx, "txn-3"); return err })
		wantCode(t, "PaymentGetByChannelTxnID(txn-3)", err, orderly.ENOTFOUND)
		equal(t, "PaymentList(o1)",
			read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) { return tx.PaymentList(ctx, "o1") }), []*orderly.Payment{p1, dup})
	})

	t.Run("SetState", func(t *testing.T) { testPaymentSetState(t, open) })
	t.Run("Handoff", func(t *testing.T) { testPaymentHandoff(t, open) })
}

// testCallbackRefusals checks the record of refused callbacks: round trip, order, filter
// by payment id, limit, truncation to the column sizes and the reason's CHECK.
func testCallbackRefusals(t *testing.T, open opener) {
	ctx, s := t.Context(), open(t)
	body := `{"payment_id":"p1","amount":1}`
	r1 := &orderly.CallbackRefusal{PaymentID: "p1", OrderID: "o1", Reason: orderly.RefusalAmountMismatch,
		Detail: "callback says 1 USD; payment p1 is 1000 USD", Status: orderly.CallbackSucceeded, Amount: 1, Currency: "USD",
		ChannelTxnID: "txn-1", Body: body, CreatedAt: t0}
	r2 := &orderly.CallbackRefusal{PaymentID: "p1", OrderID: "o2", Reason: orderly.RefusalOrderMismatch, Detail: "other order",
		Status: orderly.CallbackFailed, Currency: "USD", Body: "{}", CreatedAt: t0.Add(time.Second)}
	other := &orderly.CallbackRefusal{PaymentID: "unknown", OrderID: "o1", Reason: orderly.RefusalUnknownPayment,
		Detail: "payment unknown not found", Status: orderly.CallbackSucceeded, Amount: 5, Currency: "EUR",
		Body: strings.Repeat("é", 40_000), CreatedAt: t0.Add(2 * time.Second)} // 80 000 bytes of two-byte runes
	for _, r := range []*orderly.CallbackRefusal{r1, r2, other} {
		inTx(t, s, func(tx store.Tx) error { return tx.CallbackRefusalInsert(ctx, r) })
	}
	list := func(paymentID string, limit int) []*orderly.CallbackRefusal {
		return read(t, s, func(tx store.Tx) ([]*orderly.CallbackRefusal, error) {
			return tx.CallbackRefusalList(ctx, paymentID, limit)
		})
	}
	got := list("p1", 10)
	for i, r := range got {
		if r.ID <= 0 || (i > 0 && r.ID <= got[i-1].ID) {
			t.Errorf("refusal ids %d at %d: want positive and increasing", r.ID, i)
		}
		if i < 2 {
			[]*orderly.CallbackRefusal{r1, r2}[i].ID = r.ID
		}
	}
	equal(t, "refusals of p1, oldest first", got, []*orderly.CallbackRefusal{r1, r2})
	equal(t, "refusals of p1, limit 1", len(list("p1", 1)), 1)
	equal(t, "refusals of a payment with none", len(list("p2", 10)), 0)
	long := list("unknown", 10)
	if len(long) != 1 || len(long[0].Body) != 64<<10 || long[0].Body != strings.Repeat("é", 32<<10) {
		t.Errorf("a body of 80 000 bytes is stored as %d bytes, want its first 65 536 (32 768 runes)", len(long[0].Body))
	}
	err := txErr(t, s, func(tx store.Tx) error {
		return tx.CallbackRefusalInsert(ctx, &orderly.CallbackRefusal{PaymentID: "p1", Reason: "bad_mood", CreatedAt: t0})
	})
	if err == nil {
		t.Error("a refusal with reason bad_mood was written, want a CHECK violation")
	}
	equal(t, "refusals of p1 after the refused insert", len(list("p1", 10)), 2)
}

func testPaymentSetState(t *testing.T, open opener) {
	t.Parallel()
	at := t0.Add(time.Minute)
	later := t0.Add(time.Hour)
	initiated := []orderly.PaymentState{orderly.PaymentInitiated}
	cases := []struct {
		name    string
		payment *paymentOpts // nil: no payment
		params  store.PaymentSetStateParams
		want    bool
	}{
		{
			name:    "Succeed",
			payment: &paymentOpts{},
			params: store.PaymentSetStateParams{From: initiated, To: orderly.PaymentSucceeded,
				ChannelTxnID: "txn-1", SucceededAt: &at},
			want: true,
		},
		{
			name:    "DuplicateSuccess",
			payment: &paymentOpts{State: orderly.PaymentSucceeded, ChannelTxnID: "txn-1", SucceededAt: &at},
			params: store.PaymentSetStateParams{From: initiated, To: orderly.PaymentSucceeded,
				ChannelTxnID: "txn-1", SucceededAt: &later},
		},
		{
			name:    "Fail",
			payment: &paymentOpts{},
			params:  store.PaymentSetStateParams{From: initiated, To: orderly.PaymentFailed, FailReason: "expired"},
			want:    true,
		},
		{
			name:    "FailAfterSuccess",
			payment: &paymentOpts{State: orderly.PaymentSucceeded, ChannelTxnID: "txn-1", SucceededAt: &at},
			params:  store.PaymentSetStateParams{From: initiated, To: orderly.PaymentFailed, FailReason: "expired"},
		},
		{
			name:    "SuccessAfterFailureWhenAllowed",
			payment: &paymentOpts{State: orderly.PaymentFailed, FailReason: "timeout"},
			params: store.PaymentSetStateParams{From: []orderly.PaymentState{orderly.PaymentInitiated, orderly.PaymentFailed},
				To: orderly.PaymentSucceeded, ChannelTxnID: "txn-2", SucceededAt: &later},
			want: true,
		},
		{
			// Zero optional fields are not written: the transaction id and time stay.
			name:    "RefundPendingKeepsFields",
			payment: &paymentOpts{State: orderly.PaymentSucceeded, ChannelTxnID: "txn-1", SucceededAt: &at},
			params: store.PaymentSetStateParams{From: []orderly.PaymentState{orderly.PaymentSucceeded},
				To: orderly.PaymentRefundPending},
			want: true,
		},
		{
			name:    "Refunded",
			payment: &paymentOpts{State: orderly.PaymentRefundPending, ChannelTxnID: "txn-1", SucceededAt: &at},
			params: store.PaymentSetStateParams{From: []orderly.PaymentState{orderly.PaymentRefundPending},
				To: orderly.PaymentRefunded, RefundedAt: &later},
			want: true,
		},
		{
			name:    "RefundedTwice",
			payment: &paymentOpts{State: orderly.PaymentRefunded, ChannelTxnID: "txn-1", SucceededAt: &at, RefundedAt: &at},
			params: store.PaymentSetStateParams{From: []orderly.PaymentState{orderly.PaymentRefundPending},
				To: orderly.PaymentRefunded, RefundedAt: &later},
		},
		{
			name:   "Missing",
			params: store.PaymentSetStateParams{From: initiated, To: orderly.PaymentFailed, FailReason: "expired"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			insertOrder(t, s, &orderOpts{ID: "o1"})
			p := c.params
			p.ID = "p1"
			var before *orderly.Payment
			if c.payment != nil {
				c.payment.ID, c.payment.OrderID = p.ID, "o1"
				before = insertPayment(t, s, c.payment)
			}
			got := write(t, s, func(tx store.Tx) (bool, error) { return tx.PaymentSetState(ctx, &p) })
			if got != c.want {
				t.Errorf("PaymentSetState = %v, want %v", got, c.want)
			}
			if before == nil {
				return
			}
			want := *before
			if c.want {
				want.State = p.To
				if p.ChannelTxnID != "" {
					want.ChannelTxnID = p.ChannelTxnID
				}
				if p.FailReason != "" {
					want.FailReason = p.FailReason
				}
				if p.SucceededAt != nil {
					want.SucceededAt = p.SucceededAt
				}
				if p.RefundedAt != nil {
					want.RefundedAt = p.RefundedAt
				}
			}
			equal(t, "payment after PaymentSetState", getPayment(t, s, p.ID), &want)
		})
	}
}

// testPaymentHandoff: the provider's id, the payer id and the handoff are kept with the
// attempt; the handoff is dropped when the attempt gets an outcome, the provider's id stays.
func testPaymentHandoff(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	insertOrder(t, s, &orderOpts{ID: "o1"})
	before := insertPayment(t, s, &paymentOpts{ID: "p1", OrderID: "o1"})
	next := &orderly.NextAction{Type: orderly.NextActionWeChatJSAPI, WeChatJSAPI: &orderly.WeChatJSAPI{AppID: "wx1",
		TimeStamp: "1764835200", NonceStr: "n", Package: "prepay_id=wx1", SignType: "RSA", PaySign: "c2ln"}}
	write(t, s, func(tx store.Tx) (bool, error) { return true, tx.PaymentSetHandoff(ctx, "p1", "wx1", next) })
	want := *before
	want.ProviderRef, want.NextAction = "wx1", next
	equal(t, "payment after PaymentSetHandoff", getPayment(t, s, "p1"), &want)
	at := t0.Add(time.Minute)
	write(t, s, func(tx store.Tx) (bool, error) {
		return tx.PaymentSetState(ctx, &store.PaymentSetStateParams{ID: "p1", From: []orderly.PaymentState{orderly.PaymentInitiated},
			To: orderly.PaymentSucceeded, ChannelTxnID: "txn-1", SucceededAt: &at})
	})
	want.State, want.ChannelTxnID, want.SucceededAt, want.NextAction = orderly.PaymentSucceeded, "txn-1", &at, nil
	equal(t, "payment after it succeeded", getPayment(t, s, "p1"), &want)
}
