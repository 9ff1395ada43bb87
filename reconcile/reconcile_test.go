package reconcile_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a wired engine on a fresh database, a reconciler over it and a raw SQL handle
// to inject faults with.
type fixture struct {
	e   *enginetest.Env
	r   *reconcile.Reconciler
	raw *sql.DB
	reg *prometheus.Registry
}

func setup(t testing.TB, dialect string, checks ...reconcile.Check) *fixture {
	t.Helper()
	e := enginetest.New(t, enginetest.Options{Dialect: dialect})
	reg := prometheus.NewRegistry()
	r, err := reconcile.New(reconcile.Config{
		Checks:     checks,
		Registerer: reg,
		Store:      e.Store, Machine: e.Engine.Machine(), Payments: e.Payments, BatchSize: 2, // small batches: pages are crossed
		Logger:   slog.New(slog.DiscardHandler),
		CloseDue: func(ctx context.Context) error { _, err := e.Closer.CloseDue(ctx, "reconcile"); return err },
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{e: e, r: r, raw: testdb.Raw(t, e.Engine.Config().DatabaseURL), reg: reg}
}

// exec runs one statement of injected SQL (literal values only: the same text runs on
// every dialect).
func (f *fixture) exec(t testing.TB, format string, args ...any) {
	t.Helper()
	q := fmt.Sprintf(format, args...)
	if _, err := f.raw.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// gauge returns orderly_reconcile_findings{kind}.
func (f *fixture) gauge(t testing.TB, kind reconcile.Kind) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "orderly_reconcile_findings" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == string(kind) {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no orderly_reconcile_findings{kind=%q}", kind)
	return 0
}

func (f *fixture) nowMS() int64 { return f.e.Clock.Now().UnixMilli() }

// closeOrder lets o's deadline pass and closes it through the closer.
func (f *fixture) closeOrder(t *testing.T, o *orderly.Order) {
	t.Helper()
	if f.e.Clock.Now().Before(o.CloseAt) {
		f.e.Clock.Set(o.CloseAt)
	}
	if _, err := f.e.Closer.CloseDue(context.Background(), closer.TriggerTimer); err != nil {
		t.Fatal(err)
	}
	if got := f.e.OrderOf(t, o.ID).State; got != orderly.StateClosed {
		t.Fatalf("order %s is %s, want closed", o.ID, got)
	}
}

// scene builds one fault of every built-in kind, each injected with SQL after the services
// made a consistent database; it returns the ids they concern.
type scene struct {
	closedPaid, closedHolds, paidUnbacked, overdue, closedPaying, closedFailed string
	payment, coupon, sku, inFlight                                             string
}

func buildScene(t *testing.T, f *fixture) scene {
	t.Helper()
	ctx := context.Background()
	e := f.e
	e.SetStock(t, "SKU-1", 100)
	e.SetStock(t, "SKU-X", 10)
	var s scene
	s.sku = "SKU-X"

	// A closed order with a succeeded payment that nothing refunds.
	a := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "ua"})
	f.closeOrder(t, a)
	s.closedPaid, s.payment = a.ID, "pay-injected"
	f.exec(t, `INSERT INTO payments (id, order_id, attempt, channel, channel_txn_id, amount, currency, state, fail_reason, created_at, succeeded_at)
		VALUES ('%s', '%s', 1, 'sim', 'txn-injected', %d, 'USD', 'succeeded', '', %d, %d)`, s.payment, a.ID, a.Amount, f.nowMS(), f.nowMS())

	// A closed order whose reservation reads held again (the stock counters agree with it)
	// and whose coupon reads frozen for it.
	c, err := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "ub", AmountOff: 100, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	b := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "ub", Quantity: 2, CouponID: c.ID})
	f.closeOrder(t, b)
	s.closedHolds, s.coupon = b.ID, c.ID
	f.exec(t, `UPDATE reservations SET state = 'held' WHERE order_id = '%s'`, b.ID)
	f.exec(t, `UPDATE stock SET held = held + 2, available = available - 2 WHERE sku = 'SKU-1'`)
	f.exec(t, `UPDATE coupons SET state = 'frozen', order_id = '%s' WHERE id = '%s'`, b.ID, c.ID)

	// A paid order whose payment no longer reads captured.
	pc := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "uc"})
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: pc.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: pc.ID, ChannelTxnID: "txn-c",
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: e.Clock.Now()}); err != nil || !res.Applied {
		t.Fatalf("pay = %+v, %v", res, err)
	}
	s.paidUnbacked = pc.ID
	f.exec(t, `UPDATE payments SET state = 'failed' WHERE id = '%s'`, p.ID)

	// A closed order that reads paying: its attempt was in flight at the close and the
	// payment.cancel that settles it was lost.
	g := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "ug"})
	f.closeOrder(t, g)
	s.closedPaying, s.inFlight = g.ID, "pay-in-flight"
	f.exec(t, `INSERT INTO payments (id, order_id, attempt, channel, amount, currency, state, fail_reason, created_at)
		VALUES ('%s', '%s', 1, 'sim', %d, 'USD', 'initiated', '', %d)`, s.inFlight, g.ID, g.Amount, f.nowMS())
	f.exec(t, `UPDATE orders SET pay_status = 'paying', current_payment_id = '%s' WHERE id = '%s'`, s.inFlight, g.ID)

	// A closed order that reads paying although its attempt failed (a failure written on
	// the payment only), with the payment.cancel that corrects it queued: no finding, and
	// the message's delivery (the Drain below) makes the order read failed.
	h := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "uh"})
	f.closeOrder(t, h)
	s.closedFailed = h.ID
	f.exec(t, `INSERT INTO payments (id, order_id, attempt, channel, amount, currency, state, fail_reason, created_at)
		VALUES ('pay-failed', '%s', 1, 'sim', %d, 'USD', 'failed', 'declined', %d)`, h.ID, h.Amount, f.nowMS())
	f.exec(t, `UPDATE orders SET pay_status = 'paying', current_payment_id = 'pay-failed', closed_at = %d WHERE id = '%s'`,
		f.nowMS()-3_600_000, h.ID)
	f.exec(t, `INSERT INTO outbox (message_id, topic, message_key, sequence, payload, state, attempts, next_attempt_at, last_error, created_at)
		VALUES ('m-cancel', 'payment.cancel', 'pay-failed', 0, '{"payment_id":"pay-failed","order_id":"%s","amount":0}', 'pending', 0, %d, '', %d)`,
		h.ID, f.nowMS(), f.nowMS())

	// A SKU whose held counter drifted from its reservations.
	f.exec(t, `UPDATE stock SET held = held + 3, available = available - 3 WHERE sku = 'SKU-X'`)

	// Messages: everything so far delivered, then one dead letter and one stuck message.
	e.Drain(t)
	f.exec(t, `INSERT INTO outbox (message_id, topic, message_key, sequence, payload, state, attempts, next_attempt_at, last_error, created_at)
		VALUES ('m-dead', 'order.closed', 'k-dead', 0, '{}', 'dead', 8, %d, 'broker down', %d)`, f.nowMS(), f.nowMS())
	f.exec(t, `INSERT INTO outbox (message_id, topic, message_key, sequence, payload, state, attempts, next_attempt_at, last_error, created_at)
		VALUES ('m-stuck', 'order.paid', 'k-stuck', 0, '{}', 'pending', 2, %d, 'timeout', %d)`, f.nowMS()-3_600_000, f.nowMS()-3_600_000)

	// An open order overdue by far more than the tolerance: the timer and the sweep missed it.
	d := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "ud", TimeoutSeconds: 60})
	s.overdue = d.ID
	e.Clock.Set(d.CloseAt.Add(5 * time.Minute))
	f.exec(t, `UPDATE orders SET closed_at = %d WHERE id = '%s'`, f.nowMS()-11*60_000, g.ID) // past StuckAfter
	return s
}

// kinds returns the findings' (kind, order or SKU, repaired) as sorted strings.
func kinds(fs []*reconcile.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, fmt.Sprintf("%s %s%s repaired=%t", f.Kind, f.OrderID, f.SKU, f.Repaired))
	}
	slices.Sort(out)
	return out
}

// TestRunRepairs injects one fault of each built-in kind, runs a repairing reconciliation
// twice and checks that each is found, the repairable ones repaired once (through the
// services, audited), and that the second run finds only the operator tasks.
func TestRunRepairs(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			f := setup(t, dialect)
			s := buildScene(t, f)
			ctx := context.Background()
			by := reconcile.Actor{Operator: "reconcile", TraceID: "trace-1"}

			rep, err := f.r.Run(ctx, reconcile.RunOptions{Repair: true, By: by})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{
				"closed_order_holds " + s.closedHolds + " repaired=true",
				"closed_order_paid " + s.closedPaid + " repaired=true",
				"closed_order_paying " + s.closedPaying + " repaired=true",
				"outbox_dead  repaired=false",
				"outbox_stuck  repaired=false",
				"overdue_order " + s.overdue + " repaired=true",
				"paid_without_payment " + s.paidUnbacked + " repaired=false",
				"stock_mismatch SKU-X repaired=true",
			}
			slices.Sort(want)
			if got := kinds(rep.Findings); !slices.Equal(got, want) {
				t.Fatalf("first run findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if rep.Repaired != 5 {
				t.Errorf("repaired = %d, want 5", rep.Repaired)
			}
			if g := f.gauge(t, reconcile.KindStockMismatch); g != 1 {
				t.Errorf("orderly_reconcile_findings{kind=stock_mismatch} = %v, want 1", g)
			}

			// The repairs took the services' paths.
			var pay *orderly.Payment
			f.e.Read(t, func(tx store.Tx) (err error) { pay, err = tx.PaymentGet(ctx, s.payment); return err })
			if pay.State != orderly.PaymentRefundPending {
				t.Errorf("kept payment is %s, want refund_pending", pay.State)
			}
			if st := f.e.StockOf(t, "SKU-X"); st.Available != 10 || st.Held != 0 || st.Sold != 0 {
				t.Errorf("SKU-X = %+v, want 10 available, 0 held, 0 sold", st)
			}
			// SKU-1: a paid unit (order c) and nothing held once b released and d closed.
			if st := f.e.StockOf(t, "SKU-1"); st.Available != 99 || st.Held != 0 || st.Sold != 1 {
				t.Errorf("SKU-1 = %+v, want 99 available, 0 held, 1 sold", st)
			}
			c, err := f.e.Orders.Coupon(ctx, s.coupon)
			if err != nil || c.State != orderly.CouponAvailable {
				t.Errorf("coupon = %+v, %v; want available", c, err)
			}
			if o := f.e.OrderOf(t, s.overdue); o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonPaymentTimeout {
				t.Errorf("overdue order = %s (%s), want closed for payment_timeout", o.State, o.CloseReason)
			}
			f.e.Drain(t)
			if got := f.e.Gateway.Refunded(s.payment); got != f.e.OrderOf(t, s.closedPaid).Amount {
				t.Errorf("gateway refunded %d for the kept payment, want the order's amount", got)
			}
			// The attempt in flight was settled at the gateway: cancelled, marked failed.
			if p, err := f.e.Payments.Payment(ctx, s.inFlight); err != nil || p.State != orderly.PaymentFailed {
				t.Errorf("attempt in flight after the repair = %+v, %v; want failed", p, err)
			}
			if o := f.e.OrderOf(t, s.closedFailed); o.PayStatus != orderly.PayFailed {
				t.Errorf("closed order whose attempt had failed: pay_status %s after its payment.cancel, want failed", o.PayStatus)
			}
			if o := f.e.OrderOf(t, s.closedPaying); o.PayStatus != orderly.PayFailed {
				t.Errorf("order closed while paying: pay_status %s after the repair, want failed", o.PayStatus)
			}

			// Each repair is audited once, by kind and target, with the trace id.
			var acts []*store.OperatorAction
			f.e.Read(t, func(tx store.Tx) (err error) {
				acts, err = tx.OperatorActionList(ctx, &store.OperatorActionListParams{Limit: 100})
				return err
			})
			var audited []string
			for _, a := range acts {
				if a.Operator != "reconcile" || a.TraceID != "trace-1" || len(a.Detail) < 2 {
					t.Errorf("audit row %+v: want operator reconcile, trace-1 and a detail", a)
				}
				audited = append(audited, a.Action+" "+a.Target)
			}
			slices.Sort(audited)
			wantAudit := []string{"repair:closed_order_holds " + s.closedHolds, "repair:closed_order_paid " + s.closedPaid,
				"repair:closed_order_paying " + s.closedPaying,
				"repair:overdue_order " + s.overdue, "repair:stock_mismatch SKU-X"}
			slices.Sort(wantAudit)
			if !slices.Equal(audited, wantAudit) {
				t.Errorf("audit = %v, want %v", audited, wantAudit)
			}

			// A second run finds only what needs an operator, and repairs nothing. The stuck
			// message went out with the Drain above (it was only late): it is gone too.
			rep2, err := f.r.Run(ctx, reconcile.RunOptions{Repair: true, By: by})
			if err != nil {
				t.Fatal(err)
			}
			want2 := []string{"outbox_dead  repaired=false",
				"paid_without_payment " + s.paidUnbacked + " repaired=false"}
			if got := kinds(rep2.Findings); !slices.Equal(got, want2) {
				t.Fatalf("second run findings = %v, want %v", got, want2)
			}
			if g := f.gauge(t, reconcile.KindStockMismatch); g != 0 {
				t.Errorf("orderly_reconcile_findings{kind=stock_mismatch} after the second run = %v, want 0", g)
			}
			f.e.Read(t, func(tx store.Tx) (err error) {
				acts, err = tx.OperatorActionList(ctx, &store.OperatorActionListParams{Limit: 100})
				return err
			})
			if len(acts) != 5 {
				t.Errorf("%d audit rows after the second run, want still 5", len(acts))
			}
		})
	}
}

// TestCheckOrder checks the per-order form: the findings of one order, repaired by
// RepairOrder, then none.
func TestCheckOrder(t *testing.T) {
	t.Parallel()
	f := setup(t, "sqlite")
	s := buildScene(t, f)
	ctx := context.Background()
	for _, c := range []struct {
		id   string
		want []string
	}{
		{s.closedPaid, []string{"closed_order_paid " + s.closedPaid + " repaired=false"}},
		{s.closedHolds, []string{"closed_order_holds " + s.closedHolds + " repaired=false"}},
		{s.paidUnbacked, []string{"paid_without_payment " + s.paidUnbacked + " repaired=false"}},
		{s.overdue, []string{"overdue_order " + s.overdue + " repaired=false"}},
		{s.closedPaying, []string{"closed_order_paying " + s.closedPaying + " repaired=false"}},
	} {
		fs, err := f.r.CheckOrder(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(fs); !slices.Equal(got, c.want) {
			t.Errorf("CheckOrder(%s) = %v, want %v", c.id, got, c.want)
		}
	}
	fs, err := f.r.RepairOrder(ctx, s.closedHolds, reconcile.Actor{Operator: "alice"})
	if err != nil || len(fs) != 1 || !fs[0].Repaired {
		t.Fatalf("RepairOrder = %v, %v; want one repaired finding", kinds(fs), err)
	}
	if fs, err := f.r.CheckOrder(ctx, s.closedHolds); err != nil || len(fs) != 0 {
		t.Errorf("after the repair: %v, %v; want no findings", kinds(fs), err)
	}
	if _, err := f.r.CheckOrder(ctx, "no-such-order"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("unknown order: %v, want ENOTFOUND", err)
	}
}

// TestStatement compares the sim channel's statement with one unknown transaction, one
// amount mismatch, one capture of ours it does not list and one transaction listed three
// times (one finding); a wallet debit and another channel's capture in the same period are
// not reported as missing from it. The other channel's statement finds its own capture and
// reports a sim transaction it lists as not its own.
func TestStatement(t *testing.T) {
	t.Parallel()
	f := setup(t, "sqlite")
	e, ctx := f.e, context.Background()
	e.SetStock(t, "SKU-1", 10)
	var captured []*orderly.Payment
	for i, txn := range []string{"txn-ok", "txn-amount", "txn-theirs"} {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: fmt.Sprintf("u%d", i)})
		p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: txn,
			Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: e.Clock.Now()}); err != nil {
			t.Fatal(err)
		}
		captured = append(captured, p)
		e.Clock.Advance(time.Second)
	}
	// A wallet debit and a Stripe capture within the statement's period.
	for i, c := range []struct{ channel, txn string }{{"wallet", "wallet:77"}, {"stripe", "pi_3"}} {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: fmt.Sprintf("w%d", i)})
		at := enginetest.Start.Add(time.Second)
		if err := e.Store.InTx(ctx, func(tx store.Tx) error {
			return tx.PaymentInsert(ctx, &orderly.Payment{ID: "pay-" + c.channel, OrderID: o.ID, Channel: c.channel, ChannelTxnID: c.txn,
				Amount: o.Amount, Currency: o.Currency, State: orderly.PaymentSucceeded, CreatedAt: at, SucceededAt: &at})
		}); err != nil {
			t.Fatal(err)
		}
	}
	at := enginetest.Start.Format(time.RFC3339)
	end := e.Clock.Now().Format(time.RFC3339)
	// The header starts with the byte order mark a spreadsheet program writes; txn-ok is
	// listed three times.
	csv := "\ufeffchannel_txn_id,amount,currency,status,time\n" +
		fmt.Sprintf("txn-ok,%d,USD,succeeded,%s\n", captured[0].Amount, at) +
		fmt.Sprintf("txn-ok,%d,USD,succeeded,%s\n", captured[0].Amount, at) +
		fmt.Sprintf("txn-ok,%d,USD,succeeded,%s\n", captured[0].Amount, at) +
		fmt.Sprintf("txn-amount,%d,USD,succeeded,%s\n", captured[1].Amount+1, at) +
		fmt.Sprintf("txn-unknown,500,USD,succeeded,%s\n", end) +
		fmt.Sprintf("txn-failed,700,USD,failed,%s\n", end)
	lines, err := reconcile.ReadStatement(strings.NewReader(csv))
	if err != nil || len(lines) != 6 {
		t.Fatalf("ReadStatement = %d lines, %v", len(lines), err)
	}
	fs, err := f.r.Statement(ctx, "sim", lines)
	if err != nil {
		t.Fatal(err)
	}
	got := map[reconcile.Kind]string{}
	for _, f := range fs {
		got[f.Kind] = f.Target
	}
	want := map[reconcile.Kind]string{
		reconcile.KindStatementMissingOurs:    "txn-unknown",
		reconcile.KindStatementAmountMismatch: "txn-amount",
		reconcile.KindStatementMissingTheirs:  "txn-theirs",
		reconcile.KindStatementDuplicate:      "txn-ok",
	}
	if len(fs) != 4 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("findings = %v (%d), want %v", got, len(fs), want)
	}
	for _, f := range fs {
		if f.Kind == reconcile.KindStatementDuplicate && !strings.Contains(f.Detail, "listed 3 times") {
			t.Errorf("duplicate finding %q, want it to say listed 3 times", f.Detail)
		}
	}

	// Stripe's statement: its capture agrees; a sim transaction on it is not Stripe's.
	lines, err = reconcile.ReadStatement(strings.NewReader("channel_txn_id,amount,currency,status,time\n" +
		fmt.Sprintf("pi_3,%d,USD,succeeded,%s\n", captured[0].Amount, at) +
		fmt.Sprintf("txn-amount,%d,USD,succeeded,%s\n", captured[1].Amount, end)))
	if err != nil {
		t.Fatal(err)
	}
	fs, err = f.r.Statement(ctx, "stripe", lines)
	if err != nil || len(fs) != 1 || fs[0].Kind != reconcile.KindStatementMissingOurs || fs[0].Target != "txn-amount" ||
		!strings.Contains(fs[0].Detail, "of channel sim, not stripe") {
		t.Fatalf("stripe statement: %v, %v; want one statement_missing_ours of txn-amount (sim's)", kinds(fs), err)
	}
	if _, err := f.r.Statement(ctx, "", lines); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Errorf("a statement of no channel: %v, want EINVALID", err)
	}
}

// TestReadStatementErrors checks that a malformed statement is refused with its line.
func TestReadStatementErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, csv, want string }{
		{"no amount column", "channel_txn_id,currency,status,time\n", `no "amount" column`},
		{"bad amount", "channel_txn_id,amount,currency,status,time\nt1,12.5,USD,succeeded,2026-11-30T08:00:00Z\n", "line 2: amount"},
		{"bad time", "channel_txn_id,amount,currency,status,time\nt1,12,USD,succeeded,yesterday\n", "line 2: time"},
		{"empty txn", "channel_txn_id,amount,currency,status,time\n,12,USD,succeeded,2026-11-30T08:00:00Z\n", "line 2: empty"},
	} {
		if _, err := reconcile.ReadStatement(strings.NewReader(c.csv)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

// BenchmarkCheckOrder measures the real-time per-order reconciliation (the admin route
// answers within 300 ms) on an order with a payment, a reservation and a coupon.
func BenchmarkCheckOrder(b *testing.B) {
	f := setup(b, "sqlite")
	e, ctx := f.e, context.Background()
	e.SetStock(b, "SKU-1", 1_000_000)
	var id string
	for i := range 2000 { // some history around it
		id = e.CreateOrder(b, enginetest.CreateOrderOpts{UserID: fmt.Sprintf("u%d", i)}).ID
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := f.r.CheckOrder(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRepairsGoOn: a repair that fails leaves its finding with the error and the other
// repairs still run; stock counters are corrected before a closed order's release, so a
// closed order whose reservation reads held again on a SKU whose counters never saw it
// (held 0) is repaired instead of failing on CHECK held >= 0 and stopping the run (as it
// did: `reconcile --repair` exited with the constraint's error and repaired nothing).
func TestRepairsGoOn(t *testing.T) {
	failing := reconcile.Check{Kind: "test_failing",
		Scan: func(_ context.Context, _ *reconcile.Reconciler, _ time.Time, emit func(*reconcile.Finding)) (int64, error) {
			emit(&reconcile.Finding{Kind: "test_failing", Detail: "a repair that cannot succeed"})
			return 1, nil
		},
		Repair: func(context.Context, *reconcile.Reconciler, *reconcile.Finding, reconcile.Actor) (bool, error) {
			return false, errors.New("participant refused")
		},
	}
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			f := setup(t, dialect, failing)
			ctx := context.Background()
			f.e.SetStock(t, "SKU-Y", 10)
			o := f.e.CreateOrder(t, enginetest.CreateOrderOpts{UserID: "uy", SKU: "SKU-Y", Quantity: 2})
			f.closeOrder(t, o)
			f.exec(t, `UPDATE reservations SET state = 'held' WHERE order_id = '%s'`, o.ID)

			rep, err := f.r.Run(ctx, reconcile.RunOptions{Repair: true, By: reconcile.Actor{Operator: "reconcile"}})
			if err != nil {
				t.Fatalf("run: %v (a failed repair must not fail the run)", err)
			}
			want := []string{
				"closed_order_holds " + o.ID + " repaired=true",
				"stock_mismatch SKU-Y repaired=true",
				"test_failing  repaired=false",
			}
			if got := kinds(rep.Findings); !slices.Equal(got, want) {
				t.Fatalf("findings:\n got %q\nwant %q", got, want)
			}
			for _, fd := range rep.Findings {
				if wantErr := fd.Kind == "test_failing"; (fd.Error != "") != wantErr ||
					wantErr && !strings.Contains(fd.Error, "participant refused") {
					t.Errorf("finding %s: error %q", fd.Kind, fd.Error)
				}
			}
			if rep.RepairErrors != 1 || rep.Repaired != 2 {
				t.Errorf("report: %d repaired, %d repair errors; want 2 and 1", rep.Repaired, rep.RepairErrors)
			}
			if st := f.e.StockOf(t, "SKU-Y"); st.Available != 10 || st.Held != 0 || st.Sold != 0 {
				t.Errorf("SKU-Y after the repairs: %+v, want 10 available, 0 held, 0 sold", st)
			}
			again, err := f.r.Run(ctx, reconcile.RunOptions{Repair: true})
			if err != nil || !slices.Equal(kinds(again.Findings), want[2:]) {
				t.Errorf("second run: %q, %v; want only %q", kinds(again.Findings), err, want[2:])
			}
		})
	}
}
