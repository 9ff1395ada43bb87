package storetest

import (
	"strconv"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testAdmin covers store.AdminTx: the audit of operator actions, the order search, the dead
// letters and the reconciliation scans.
func testAdmin(t *testing.T, open opener) {
	t.Run("OperatorActions", func(t *testing.T) { testOperatorActions(t, open) })
	t.Run("OrderSearch", func(t *testing.T) { testOrderSearch(t, open) })
	t.Run("DeadLetters", func(t *testing.T) { testDeadLetters(t, open) })
	t.Run("ReconcileScans", func(t *testing.T) { testReconcileScans(t, open) })
	t.Run("StockLedger", func(t *testing.T) { testStockLedger(t, open) })
	t.Run("ReconcileReports", func(t *testing.T) { testReconcileReports(t, open) })
}

func listActions(t *testing.T, s store.Store, p *store.OperatorActionListParams) []*store.OperatorAction {
	t.Helper()
	return read(t, s, func(tx store.Tx) ([]*store.OperatorAction, error) { return tx.OperatorActionList(t.Context(), p) })
}

func actionTargets(as []*store.OperatorAction) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Action+":"+a.Target)
	}
	return out
}

func testOperatorActions(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	in := []*store.OperatorAction{
		{At: t0, Operator: "alice", Action: "redrive", Target: "17", Detail: []byte(`{"topic":"order.closed","n":[1,2]}`), TraceID: "tr-1"},
		{At: t0.Add(time.Second), Operator: "bob", Action: "discard", Target: "18", Reason: "retired"},
		{At: t0.Add(2 * time.Second), Operator: "reconcile", Action: "repair:stock_mismatch", Target: "17", Detail: []byte(`{}`)},
	}
	for _, a := range in {
		inTx(t, s, func(tx store.Tx) error { return tx.OperatorActionInsert(ctx, a) })
	}
	if in[0].ID <= 0 || in[1].ID <= in[0].ID || in[2].ID <= in[1].ID {
		t.Fatalf("ids %d, %d, %d: want set and increasing", in[0].ID, in[1].ID, in[2].ID)
	}
	all := listActions(t, s, &store.OperatorActionListParams{Limit: 10})
	equal(t, "newest first", actionTargets(all), []string{"repair:stock_mismatch:17", "discard:18", "redrive:17"})
	if a := all[2]; a.Operator != "alice" || a.TraceID != "tr-1" || !a.At.Equal(t0) || !jsonEqual(a.Detail, in[0].Detail) {
		t.Errorf("first action read back as %+v", a)
	}
	if !jsonEqual(all[1].Detail, []byte(`{}`)) || all[1].Reason != "retired" {
		t.Errorf("an action without detail reads %s, reason %q; want {} and the reason", all[1].Detail, all[1].Reason)
	}
	equal(t, "on target 17", actionTargets(listActions(t, s, &store.OperatorActionListParams{Target: "17", Limit: 10})),
		[]string{"repair:stock_mismatch:17", "redrive:17"})
	equal(t, "before the newest, limit 1", actionTargets(listActions(t, s, &store.OperatorActionListParams{BeforeID: in[2].ID, Limit: 1})),
		[]string{"discard:18"})
	err := txErr(t, s, func(tx store.Tx) error {
		return tx.OperatorActionInsert(ctx, &store.OperatorAction{At: t0, Operator: "", Action: "redrive", Target: "1"})
	})
	if err == nil {
		t.Error("an action without an operator was stored; want the CHECK to refuse it")
	}
}

func orderIDs(os []*orderly.Order) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.ID)
	}
	return out
}

func testOrderSearch(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	closedAt := t0.Add(2 * time.Hour)
	a := insertOrder(t, s, &orderOpts{ID: "os-a", UserID: "u1", CreatedAt: t0})
	b := insertOrder(t, s, &orderOpts{ID: "os-b", UserID: "u2", CreatedAt: t0.Add(time.Hour)})
	c := insertOrder(t, s, &orderOpts{ID: "os-c", UserID: "u1", CreatedAt: t0.Add(time.Hour), State: orderly.StateClosed,
		ClosedAt: &closedAt, CloseReason: orderly.CloseReasonPaymentTimeout})
	d := insertOrder(t, s, &orderOpts{ID: "os-d", UserID: "u1", CreatedAt: t0.Add(3 * time.Hour)})
	search := func(p store.OrderSearchParams) []string {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 10
		}
		return orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) { return tx.OrderSearch(ctx, &p) }))
	}
	for _, c := range []struct {
		name string
		p    store.OrderSearchParams
		want []string
	}{
		{"all", store.OrderSearchParams{}, []string{a.ID, b.ID, c.ID, d.ID}},
		{"user", store.OrderSearchParams{UserID: "u1"}, []string{a.ID, c.ID, d.ID}},
		{"user and state", store.OrderSearchParams{UserID: "u1", State: orderly.StatePendingPayment}, []string{a.ID, d.ID}},
		{"flow", store.OrderSearchParams{Flow: "group_buy"}, nil},
		{"created range", store.OrderSearchParams{CreatedFrom: t0.Add(time.Hour), CreatedTo: t0.Add(3 * time.Hour)}, []string{b.ID, c.ID}},
		{"created from", store.OrderSearchParams{CreatedFrom: t0.Add(time.Hour)}, []string{b.ID, c.ID, d.ID}},
		{"closed range", store.OrderSearchParams{ClosedFrom: closedAt, ClosedTo: closedAt.Add(time.Millisecond)}, []string{c.ID}},
		{"closed to, before it", store.OrderSearchParams{ClosedTo: closedAt}, nil},
		{"keyset page", store.OrderSearchParams{UserID: "u1", AfterID: a.ID, Limit: 1}, []string{c.ID}},
		{"keyset last page", store.OrderSearchParams{UserID: "u1", AfterID: d.ID}, nil},
		// GET /v1/orders, a buyer's list: user, flow and the keyset together.
		{"buyer list page", store.OrderSearchParams{UserID: "u1", Flow: orderly.FlowStandard, AfterID: a.ID, Limit: 2}, []string{c.ID, d.ID}},
		{"buyer list, closed", store.OrderSearchParams{UserID: "u1", State: orderly.StateClosed, Flow: orderly.FlowStandard}, []string{c.ID}},
	} {
		equal(t, c.name, search(c.p), c.want)
	}
}

func deadList(t *testing.T, s store.Store, f store.OutboxFilter) []int64 {
	t.Helper()
	if f.Limit == 0 {
		f.Limit = 10
	}
	return ids64(read(t, s, func(tx store.Tx) ([]*orderly.Message, error) { return tx.OutboxDeadList(t.Context(), &f) }))
}

func testDeadLetters(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	m1 := insertMessage(t, s, orderly.TopicOrderClosed, "k1", t0)
	m2 := insertMessage(t, s, orderly.TopicOrderPaid, "k2", t0.Add(time.Minute))
	m3 := insertMessage(t, s, orderly.TopicOrderClosed, "k3", t0.Add(2*time.Minute))
	pending := insertMessage(t, s, orderly.TopicOrderClosed, "k1", t0.Add(3*time.Minute))
	for _, id := range []int64{m1, m2, m3} {
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: id, LastError: "boom", Dead: true})
		})
	}
	equal(t, "every dead letter", deadList(t, s, store.OutboxFilter{}), []int64{m1, m2, m3})
	equal(t, "by topic", deadList(t, s, store.OutboxFilter{Topic: orderly.TopicOrderClosed}), []int64{m1, m3})
	equal(t, "created range", deadList(t, s, store.OutboxFilter{CreatedFrom: t0.Add(time.Minute), CreatedTo: t0.Add(2 * time.Minute)}), []int64{m2})
	equal(t, "keyset", deadList(t, s, store.OutboxFilter{AfterID: m1, Limit: 1}), []int64{m2})

	stuck := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxStuckList(ctx, t0.Add(4*time.Minute), 0, 10)
	})
	equal(t, "stuck: pending and due before", ids64(stuck), []int64{pending})
	equal(t, "stuck: none due before", len(read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxStuckList(ctx, t0.Add(3*time.Minute), 0, 10)
	})), 0)
	equal(t, "undelivered of k1", ids64(read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxKeyUndelivered(ctx, "k1", 10)
	})), []int64{m1, pending})

	got := write(t, s, func(tx store.Tx) (*orderly.Message, error) { return tx.OutboxDiscard(ctx, m2) })
	if got.ID != m2 || got.Topic != orderly.TopicOrderPaid || got.Key != "k2" || got.LastError != "boom" || !jsonEqual(got.Payload, []byte(`{"order_id":"k2"}`)) {
		t.Errorf("discarded message = %+v", got)
	}
	equal(t, "after the discard", deadList(t, s, store.OutboxFilter{}), []int64{m1, m3})
	for _, id := range []int64{m2, pending, 999_999} {
		err := txErr(t, s, func(tx store.Tx) error { _, err := tx.OutboxDiscard(ctx, id); return err })
		wantCode(t, "discard of "+strconv.FormatInt(id, 10), err, orderly.ENOTFOUND)
	}
	if m := getMessage(t, s, pending); m.State != orderly.MessagePending {
		t.Errorf("the pending message is %s after a refused discard", m.State)
	}
}

func testReconcileScans(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	setStock(t, s, "sku-1", 10)
	closedAt := t0.Add(time.Hour)
	// A closed order that kept a succeeded payment, and one whose payment was refunded.
	kept := insertOrder(t, s, closedOpts("rs-kept", closedAt))
	keptPay := insertPayment(t, s, &paymentOpts{ID: "rs-pay-kept", OrderID: kept.ID, ChannelTxnID: "t-kept",
		State: orderly.PaymentSucceeded, SucceededAt: ptr(t0.Add(time.Minute))})
	back := insertOrder(t, s, closedOpts("rs-back", closedAt))
	backPay := insertPayment(t, s, &paymentOpts{ID: "rs-pay-back", OrderID: back.ID, ChannelTxnID: "t-back",
		State: orderly.PaymentRefunded, SucceededAt: ptr(t0.Add(2 * time.Minute)), RefundedAt: ptr(t0.Add(3 * time.Minute))})
	// A paid order with its capture, and one without.
	paid := insertOrder(t, s, paidOpts("rs-paid", t0))
	paidPay := insertPayment(t, s, &paymentOpts{ID: "rs-pay-paid", OrderID: paid.ID, ChannelTxnID: "t-paid",
		State: orderly.PaymentSucceeded, SucceededAt: ptr(t0.Add(4 * time.Minute))})
	unbacked := insertOrder(t, s, paidOpts("rs-unbacked", t0))
	insertPayment(t, s, &paymentOpts{OrderID: unbacked.ID, State: orderly.PaymentFailed})
	// A closed order whose reservation is still held (moved to closed without its effects),
	// one whose coupon is still frozen for it, and a closed order that holds nothing.
	held := insertOrder(t, s, &orderOpts{ID: "rs-held"})
	reserve(t, s, held.ID, "sku-1", 2)
	frozen := insertOrder(t, s, &orderOpts{ID: "rs-frozen", CouponID: "rs-coupon"})
	insertCoupon(t, s, &couponOpts{ID: "rs-coupon", State: orderly.CouponFrozen, OrderID: frozen.ID})
	write(t, s, func(tx store.Tx) ([]string, error) {
		return tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{held.ID, frozen.ID}, From: orderly.StatePendingPayment,
			To: orderly.StateClosed, Event: orderly.EventTimeout, Now: closedAt, CloseReason: orderly.CloseReasonPaymentTimeout})
	})

	payIDs := func(ps []*orderly.Payment) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.ID)
		}
		return out
	}
	equal(t, "closed orders that kept a payment", payIDs(read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) {
		return tx.ReconcileClosedPaid(ctx, "", 10)
	})), []string{keptPay.ID})
	equal(t, "closed holding", orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) { return tx.ReconcileClosedHeld(ctx, "", 10) })),
		[]string{frozen.ID, held.ID})
	equal(t, "closed holding, keyset", orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
		return tx.ReconcileClosedHeld(ctx, frozen.ID, 10)
	})), []string{held.ID})
	// Closed while paying: one attempt settled by nothing, one whose payment.cancel is
	// pending, one failed, one closed after the cut-off.
	paying := func(id string, closed time.Time, state orderly.PaymentState) *orderly.Order {
		o := closedOpts(id, closed)
		o.PayStatus, o.CurrentPaymentID = orderly.PayPaying, "pay-"+id
		ord := insertOrder(t, s, o)
		insertPayment(t, s, &paymentOpts{ID: "pay-" + id, OrderID: id, State: state})
		return ord
	}
	unsettled := paying("rs-paying", closedAt, orderly.PaymentInitiated)
	paying("rs-paying-cancel", closedAt, orderly.PaymentInitiated)
	insertMessage(t, s, orderly.TopicPaymentCancel, "pay-rs-paying-cancel", closedAt)
	paying("rs-paying-failed", closedAt, orderly.PaymentFailed) // settled, only its pay_status lags
	paying("rs-paying-recent", closedAt.Add(time.Minute), orderly.PaymentInitiated)
	equal(t, "closed and still paying", orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
		return tx.ReconcileClosedPaying(ctx, closedAt, "", 10)
	})), []string{unsettled.ID})
	equal(t, "closed and still paying, keyset", orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
		return tx.ReconcileClosedPaying(ctx, closedAt.Add(time.Minute), unsettled.ID, 10)
	})), []string{"rs-paying-recent"})
	equal(t, "paid without a capture", orderIDs(read(t, s, func(tx store.Tx) ([]*orderly.Order, error) {
		return tx.ReconcilePaidUnbacked(ctx, "", 10)
	})), []string{unbacked.ID})
	equal(t, "captured between", payIDs(read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) {
		return tx.ReconcilePaymentsCaptured(ctx, "", t0.Add(2*time.Minute), t0.Add(4*time.Minute), "", 10)
	})), []string{backPay.ID, paidPay.ID})
	// One channel's captures: a wallet debit and another provider's capture in the same
	// period are left out; a variant of the channel is in.
	walletOrder := insertOrder(t, s, paidOpts("rs-wallet", t0))
	insertPayment(t, s, &paymentOpts{ID: "rs-pay-wallet", OrderID: walletOrder.ID, Channel: "wallet", ChannelTxnID: "wallet:1",
		State: orderly.PaymentSucceeded, SucceededAt: ptr(t0.Add(3 * time.Minute))})
	stripeOrder := insertOrder(t, s, paidOpts("rs-stripe", t0))
	stripePay := insertPayment(t, s, &paymentOpts{ID: "rs-pay-stripe", OrderID: stripeOrder.ID, Channel: "stripe", Variant: "v2",
		ChannelTxnID: "pi_1", State: orderly.PaymentSucceeded, SucceededAt: ptr(t0.Add(3 * time.Minute))})
	equal(t, "captured between on stripe", payIDs(read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) {
		return tx.ReconcilePaymentsCaptured(ctx, "stripe", t0.Add(2*time.Minute), t0.Add(4*time.Minute), "", 10)
	})), []string{stripePay.ID})
	equal(t, "captured between on sim, keyset", payIDs(read(t, s, func(tx store.Tx) ([]*orderly.Payment, error) {
		return tx.ReconcilePaymentsCaptured(ctx, "sim", t0.Add(2*time.Minute), t0.Add(4*time.Minute), backPay.ID, 10)
	})), []string{paidPay.ID})
}

func ledger(t *testing.T, s store.Store, sku string) *store.StockLedger {
	t.Helper()
	return read(t, s, func(tx store.Tx) (*store.StockLedger, error) { return tx.StockLedgerGet(t.Context(), sku) })
}

func testStockLedger(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	setStock(t, s, "led-a", 10)
	setStock(t, s, "led-b", 5)
	insertOrder(t, s, &orderOpts{ID: "led-1"})
	insertOrder(t, s, &orderOpts{ID: "led-2"})
	reserve(t, s, "led-1", "led-a", 2)
	reserve(t, s, "led-2", "led-a", 3)
	inTx(t, s, func(tx store.Tx) error { _, err := tx.ReservationsCommit(ctx, "led-2", t0); return err })
	equal(t, "ledger of led-a", ledger(t, s, "led-a"),
		&store.StockLedger{SKU: "led-a", Available: 5, Held: 2, Sold: 3, LedgerHeld: 2, LedgerSold: 3})
	all := read(t, s, func(tx store.Tx) ([]*store.StockLedger, error) { return tx.StockLedgers(ctx, "", 10) })
	equal(t, "every ledger", all, []*store.StockLedger{
		{SKU: "led-a", Available: 5, Held: 2, Sold: 3, LedgerHeld: 2, LedgerSold: 3},
		{SKU: "led-b", Available: 5},
	})
	equal(t, "ledgers after led-a", len(read(t, s, func(tx store.Tx) ([]*store.StockLedger, error) { return tx.StockLedgers(ctx, "led-a", 10) })), 1)
	err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.StockLedgerGet(ctx, "nope"); return err })
	wantCode(t, "ledger of an unknown SKU", err, orderly.ENOTFOUND)

	// Counters that drifted (held 4 instead of 2) are put back to the ledger, the difference
	// going to available; a stale guard or a negative available changes nothing.
	correct := func(p store.StockCorrectParams) bool {
		return write(t, s, func(tx store.Tx) (bool, error) { return tx.StockCorrect(ctx, &p) })
	}
	if !correct(store.StockCorrectParams{SKU: "led-a", FromHeld: 2, FromSold: 3, ToHeld: 4, ToSold: 3}) {
		t.Fatal("drift: StockCorrect did not change the row")
	}
	if l := ledger(t, s, "led-a"); l.Agrees() || l.Held != 4 || l.Available != 3 {
		t.Fatalf("after the drift: %+v", l)
	}
	if correct(store.StockCorrectParams{SKU: "led-a", FromHeld: 2, FromSold: 3, ToHeld: 2, ToSold: 3}) {
		t.Error("a correction guarded by stale counters changed the row")
	}
	if correct(store.StockCorrectParams{SKU: "led-a", FromHeld: 4, FromSold: 3, ToHeld: 4, ToSold: 10}) {
		t.Error("a correction that makes available negative changed the row")
	}
	if !correct(store.StockCorrectParams{SKU: "led-a", FromHeld: 4, FromSold: 3, ToHeld: 2, ToSold: 3}) {
		t.Fatal("the correction did not change the row")
	}
	equal(t, "corrected", ledger(t, s, "led-a"), &store.StockLedger{SKU: "led-a", Available: 5, Held: 2, Sold: 3, LedgerHeld: 2, LedgerSold: 3})
}

func testReconcileReports(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	in := []*store.ReconcileReport{
		{Instance: "i1", StartedAt: t0, FinishedAt: t0.Add(time.Second), Findings: 2, Repaired: 1, Report: []byte(`{"findings":[{"kind":"a"},{"kind":"b"}]}`)},
		{Instance: "i2", StartedAt: t0.Add(time.Hour), FinishedAt: t0.Add(time.Hour + time.Second), Report: []byte(`{"findings":[]}`)},
	}
	for _, r := range in {
		inTx(t, s, func(tx store.Tx) error { return tx.ReconcileReportInsert(ctx, r) })
	}
	if in[0].ID <= 0 || in[1].ID <= in[0].ID {
		t.Fatalf("ids %d, %d: want set and increasing", in[0].ID, in[1].ID)
	}
	got := read(t, s, func(tx store.Tx) ([]*store.ReconcileReport, error) { return tx.ReconcileReportList(ctx, 10) })
	if len(got) != 2 || got[0].ID != in[1].ID || got[1].Instance != "i1" || got[1].Findings != 2 || got[1].Repaired != 1 ||
		!got[1].StartedAt.Equal(t0) || !jsonEqual(got[1].Report, in[0].Report) {
		t.Errorf("reports = %+v", got)
	}
	err := txErr(t, s, func(tx store.Tx) error {
		return tx.ReconcileReportInsert(ctx, &store.ReconcileReport{Instance: "i3", StartedAt: t0, FinishedAt: t0, Findings: 1, Repaired: 2, Report: []byte(`{}`)})
	})
	if err == nil {
		t.Error("a report with more repairs than findings was stored; want the CHECK to refuse it")
	}
}
