package checkout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/checkout"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/fault"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
	"github.com/orderlyhq/orderly/wallet"
)

// bundle is an engine on a fresh database with one SKU, one buyer's wallet and coupon.
type bundle struct {
	e      *engine.Engine
	cfg    engine.Config
	coupon string
}

const (
	sku       = "sku-1"
	buyer     = "buyer-1"
	unitPrice = 1200
	amountOff = 200
)

func config(t *testing.T, url string) engine.Config {
	t.Helper()
	return engine.Config{Gateway: sim.New(), DatabaseURL: url, CallbackSecret: []byte("s"), SweepInterval: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// setup opens an engine (started when start is set) with stock units of sku, balance in
// the buyer's wallet (none when 0) and a coupon of amountOff for the buyer.
func setup(t *testing.T, cfg engine.Config, start bool, stock, balance int64) *bundle {
	t.Helper()
	ctx := t.Context()
	e, err := engine.Open(ctx, cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if start {
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Orders().SetStock(ctx, sku, stock); err != nil {
		t.Fatal(err)
	}
	if balance > 0 {
		if _, err := e.Wallets().Credit(ctx, &orderly.WalletMoveParams{UserID: buyer, Currency: "USD", Amount: balance, IdempotencyKey: "top-up"}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := e.Orders().CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: buyer, AmountOff: amountOff, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{e: e, cfg: cfg, coupon: c.ID}
}

func sqliteConfig(t *testing.T) engine.Config {
	return config(t, sqlitetest.Path(t))
}

func (b *bundle) params(coupon bool) *orderly.CreateOrderParams {
	p := &orderly.CreateOrderParams{UserID: buyer, Currency: "USD", PaymentMethod: orderly.PaymentMethodWallet,
		Items: []orderly.Item{{SKU: sku, Quantity: 1, UnitPrice: unitPrice}}}
	if coupon {
		p.CouponID = b.coupon
	}
	return p
}

// state is what a checkout touches, read at once.
type state struct {
	balance, platform int64
	stock             *orderly.Stock
	coupon            string
}

func (b *bundle) read(t *testing.T) state {
	t.Helper()
	ctx := t.Context()
	var s state
	err := b.e.Store().Read(ctx, func(tx store.Tx) error {
		if a, err := tx.WalletAccountGet(ctx, orderly.UserAccount(buyer, "USD").ID()); err == nil {
			s.balance = a.Available
			if a.Held != 0 {
				return fmt.Errorf("held %d", a.Held)
			}
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		var err error
		if s.platform, _, err = wallet.PlatformBalance(ctx, tx, "USD"); err != nil {
			return err
		}
		violations, err := verify.CheckWallets(ctx, tx)
		if err != nil {
			return err
		}
		if len(violations) > 0 {
			return fmt.Errorf("wallet check: %v", violations)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.stock, err = b.e.Orders().Stock(ctx, sku); err != nil {
		t.Fatal(err)
	}
	c, err := b.e.Orders().Coupon(ctx, b.coupon)
	if err != nil {
		t.Fatal(err)
	}
	s.coupon = c.State
	return s
}

// actions counts the saga log's rows by "step/phase/outcome".
func actions(t *testing.T, e *engine.Engine, id string) (map[string]int, *saga.Instance) {
	t.Helper()
	inst, log, err := e.Sagas().Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, r := range log {
		n[r.StepName+"/"+string(r.Phase)+"/"+string(r.Outcome)]++
		if r.IdempotencyKey != saga.IdempotencyKey(id, r.StepName, r.Phase) {
			t.Errorf("log row %+v: key %s", r, r.IdempotencyKey)
		}
	}
	return n, inst
}

// post sends POST /v1/orders to the engine's handler.
func post(t *testing.T, e *engine.Engine, body string) (*httptest.ResponseRecorder, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	e.Handler().ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	return rec, out
}

// TestCheckoutPaid: POST /v1/orders with payment_method wallet answers 201 with the order
// paid; the wallet lost the amount after the coupon (1200 − 200) to the platform, the
// ledger balances, the unit is sold, the coupon used, the payment recorded once, and the
// saga's log shows each action once under its operation key.
func TestCheckoutPaid(t *testing.T) {
	t.Parallel()
	b := setup(t, sqliteConfig(t), false, 5, 10_000)
	rec, out := post(t, b.e, `{"user_id":"buyer-1","currency":"USD","payment_method":"wallet","coupon_id":"`+b.coupon+
		`","items":[{"sku":"sku-1","quantity":1,"unit_price":1200}]}`)
	if rec.Code != http.StatusCreated || out["state"] != "paid" || out["pay_status"] != "paid" || out["amount"] != float64(1000) {
		t.Fatalf("POST: %d %s", rec.Code, rec.Body)
	}
	id := out["id"].(string)
	s := b.read(t)
	if s.balance != 9_000 || s.platform != 1_000 {
		t.Errorf("balance %d platform %d, want 9000 and 1000", s.balance, s.platform)
	}
	if *s.stock != (orderly.Stock{SKU: sku, Available: 4, Held: 0, Sold: 1}) {
		t.Errorf("stock %+v, want 4 available, 1 sold", *s.stock)
	}
	if s.coupon != orderly.CouponUsed {
		t.Errorf("coupon %s, want used", s.coupon)
	}
	pays, err := b.e.Payments().OrderPayments(t.Context(), id)
	if err != nil || len(pays) != 1 || pays[0].Channel != checkout.Channel || pays[0].State != orderly.PaymentSucceeded || pays[0].Amount != 1000 {
		t.Fatalf("payments %+v %v", pays, err)
	}
	tr, err := b.e.Wallets().Transfer(t.Context(), strings.TrimPrefix(pays[0].ChannelTxnID, "wallet:"))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Kind != orderly.TransferDebit || tr.Amount != 1000 || tr.IdempotencyKey != saga.IdempotencyKey(id, checkout.StepPay, saga.PhaseAction) {
		t.Errorf("debit %+v", tr)
	}
	// The buyer's side of the debit; the platform's other side and the ledger summing to
	// zero are checked by verify.CheckWallets in read.
	w, err := b.e.Wallets().Wallet(t.Context(), buyer, "USD", nil)
	if err != nil || len(w.Entries) != 2 || w.Entries[0].TransferID != tr.ID || w.Entries[0].Amount != -1000 || w.Entries[1].Amount != 10_000 {
		t.Errorf("buyer's entries %+v %v", w, err)
	}
	n, inst := actions(t, b.e, id)
	if inst.State != saga.StateSucceeded || len(n) != 4 {
		t.Fatalf("saga %s, log %v", inst.State, n)
	}
	for _, st := range []string{"order", "stock", "coupon", "pay"} {
		if n[st+"/action/succeeded"] != 1 {
			t.Errorf("log %v: %s not once", n, st)
		}
	}
}

// TestCheckoutInsufficientFunds: a wallet of 500 for an order of 1000 → 409
// insufficient-funds; the order is closed (insufficient_funds), its unit back in
// available, the coupon available again, the balance unchanged, and the debit was not
// retried.
func TestCheckoutInsufficientFunds(t *testing.T) {
	t.Parallel()
	b := setup(t, sqliteConfig(t), false, 5, 500)
	rec, out := post(t, b.e, `{"user_id":"buyer-1","currency":"USD","payment_method":"wallet","coupon_id":"`+b.coupon+
		`","items":[{"sku":"sku-1","quantity":1,"unit_price":1200}]}`)
	if rec.Code != http.StatusConflict || !strings.HasSuffix(out["type"].(string), "/insufficient-funds") {
		t.Fatalf("POST: %d %s", rec.Code, rec.Body)
	}
	detail, _ := out["detail"].(string)
	id := between(detail, "order ", " is closed")
	o, err := b.e.Orders().Order(t.Context(), id)
	if err != nil {
		t.Fatalf("order named by %q: %v", detail, err)
	}
	if o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonInsufficientFunds {
		t.Errorf("order %s (%s), want closed (insufficient_funds)", o.State, o.CloseReason)
	}
	s := b.read(t)
	if s.balance != 500 || s.platform != 0 || *s.stock != (orderly.Stock{SKU: sku, Available: 5}) || s.coupon != orderly.CouponAvailable {
		t.Errorf("after: balance %d platform %d stock %+v coupon %s; want 500, 0, 5 available, available", s.balance, s.platform, *s.stock, s.coupon)
	}
	n, inst := actions(t, b.e, id)
	if inst.State != saga.StateCompensated || n["pay/action/business_failure"] != 1 || n["pay/action/transient"] != 0 || n["pay/compensation/succeeded"] != 0 ||
		n["coupon/compensation/succeeded"] != 1 || n["stock/compensation/succeeded"] != 1 || n["order/compensation/succeeded"] != 1 || n["pay/action/succeeded"] != 0 {
		t.Errorf("saga %s, log %v", inst.State, n)
	}
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// failNth returns the engine.Wrap of saga faults that fail (transiently) the calls whose
// 1-based numbers are in fail, and let the others through.
func failNth(fail ...int64) engine.Wrap {
	var n atomic.Int64
	return engine.Wrap{Participant: (&fault.Saga{FailRate: 0.5, Float64: func() float64 {
		k := n.Add(1)
		for _, f := range fail {
			if k == f {
				return 0
			}
		}
		return 0.99
	}}).Wrap}
}

// waitSaga polls the saga until it ends (the engine's timer runs its retries).
func waitSaga(t *testing.T, e *engine.Engine, id string) *saga.Instance {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		inst, _, err := e.Sagas().Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State == saga.StateSucceeded || inst.State == saga.StateCompensated || inst.State == saga.StateStuck {
			return inst
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga %s still %s at step %d after 15 s", id, inst.State, inst.CurrentStep)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}

// TestCheckoutTransientThenSuccess: the payment step (the wallet debit and paid) fails
// transiently once (the 4th call): the checkout answers the order pending, the engine's
// timer retries the step with the same key, and the order ends paid with one debit.
func TestCheckoutTransientThenSuccess(t *testing.T) {
	t.Parallel()
	cfg := sqliteConfig(t)
	cfg.Wrap = failNth(4)
	b := setup(t, cfg, true, 5, 10_000)
	o, created, err := b.e.Service("wallet_checkout").(*checkout.Service).Checkout(t.Context(), b.params(true))
	if err != nil || !created || o.State != orderly.StatePendingPayment {
		t.Fatalf("checkout: %+v %v %v", o, created, err)
	}
	if inst := waitSaga(t, b.e, o.ID); inst.State != saga.StateSucceeded {
		t.Fatalf("saga %s: %s", inst.State, inst.LastError)
	}
	n, _ := actions(t, b.e, o.ID)
	if n["pay/action/transient"] != 1 || n["pay/action/succeeded"] != 1 || n["order/action/succeeded"] != 1 || len(n) != 5 {
		t.Errorf("log %v", n)
	}
	o, _ = b.e.Orders().Order(t.Context(), o.ID)
	s := b.read(t)
	if o.State != orderly.StatePaid || s.balance != 9_000 || s.platform != 1_000 || s.stock.Sold != 1 || s.coupon != orderly.CouponUsed {
		t.Errorf("order %s balance %d platform %d stock %+v coupon %s", o.State, s.balance, s.platform, *s.stock, s.coupon)
	}
}

// TestCheckoutCrashResumes: the first process runs order, stock and coupon and records a
// transient failure of the payment step (debit and paid), then stops before any retry (it never started its
// timer); a second process on the same database resumes the saga from its log: the debit
// and paid step runs, the first three steps do not run again.
func TestCheckoutCrashResumes(t *testing.T) {
	t.Parallel()
	cfg := sqliteConfig(t)
	cfg.Wrap = failNth(4)
	b := setup(t, cfg, false, 5, 10_000)
	o, _, err := b.e.Service("wallet_checkout").(*checkout.Service).Checkout(t.Context(), b.params(true))
	if err != nil || o.State != orderly.StatePendingPayment {
		t.Fatalf("checkout: %+v %v", o, err)
	}
	mid := b.read(t)
	if mid.balance != 10_000 || mid.stock.Held != 1 || mid.coupon != orderly.CouponFrozen {
		t.Fatalf("mid-saga: balance %d stock %+v coupon %s", mid.balance, *mid.stock, mid.coupon)
	}
	if err := b.e.Close(context.Background()); err != nil { // the process stops
		t.Fatal(err)
	}
	cfg.Wrap = engine.Wrap{}
	e2, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e2.Close(context.Background()) })
	if err := e2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if inst := waitSaga(t, e2, o.ID); inst.State != saga.StateSucceeded {
		t.Fatalf("saga %s: %s", inst.State, inst.LastError)
	}
	n, _ := actions(t, e2, o.ID)
	if n["order/action/succeeded"] != 1 || n["stock/action/succeeded"] != 1 || n["coupon/action/succeeded"] != 1 ||
		n["pay/action/transient"] != 1 || n["pay/action/succeeded"] != 1 || len(n) != 5 {
		t.Errorf("log %v", n)
	}
	b2 := &bundle{e: e2, coupon: b.coupon}
	s := b2.read(t)
	o, _ = e2.Orders().Order(t.Context(), o.ID)
	if o.State != orderly.StatePaid || s.balance != 9_000 || s.platform != 1_000 || *s.stock != (orderly.Stock{SKU: sku, Available: 4, Sold: 1}) || s.coupon != orderly.CouponUsed {
		t.Errorf("order %s balance %d platform %d stock %+v coupon %s", o.State, s.balance, s.platform, *s.stock, s.coupon)
	}
}

// TestCheckoutCancelledWhilePaying: the payment step fails transiently (the 4th call) and
// the buyer cancels the pending order meanwhile, so the retried payment is a business
// failure (not payable): nothing was debited, the stock and coupon are released once (by
// the cancel; the compensations find nothing left to release), and the order stays closed
// by the buyer.
func TestCheckoutCancelledWhilePaying(t *testing.T) {
	t.Parallel()
	cfg := sqliteConfig(t)
	cfg.Wrap = failNth(4)
	b := setup(t, cfg, false, 5, 10_000)
	o, _, err := b.e.Service("wallet_checkout").(*checkout.Service).Checkout(t.Context(), b.params(true))
	if err != nil || o.State != orderly.StatePendingPayment {
		t.Fatalf("checkout: %+v %v", o, err)
	}
	if _, err := b.e.Orders().CancelOrder(t.Context(), o.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	if err := b.e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if inst := waitSaga(t, b.e, o.ID); inst.State != saga.StateCompensated {
		t.Fatalf("saga %s: %s", inst.State, inst.LastError)
	}
	n, _ := actions(t, b.e, o.ID)
	if n["pay/action/business_failure"] != 1 || n["pay/action/succeeded"] != 0 || n["coupon/compensation/succeeded"] != 1 ||
		n["stock/compensation/succeeded"] != 1 || n["order/compensation/succeeded"] != 1 {
		t.Errorf("log %v", n)
	}
	s := b.read(t)
	o, _ = b.e.Orders().Order(t.Context(), o.ID)
	if o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonBuyerCancelled || s.balance != 10_000 || s.platform != 0 ||
		*s.stock != (orderly.Stock{SKU: sku, Available: 5}) || s.coupon != orderly.CouponAvailable {
		t.Errorf("order %s (%s) balance %d platform %d stock %+v coupon %s", o.State, o.CloseReason, s.balance, s.platform, *s.stock, s.coupon)
	}
}

// TestCheckoutConcurrent: 100 concurrent checkouts of 1000 each against a balance of 37 000
// (and stock for all): exactly 37 are paid, 63 refused insufficient-funds with their
// orders closed, the balance ends 0, the platform holds 37 000, 37 units are sold and 63
// back in available; on SQLite, and on PostgreSQL and MariaDB when their URLs are set.
func TestCheckoutConcurrent(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) engine.Config{
		"sqlite":   sqliteConfig,
		"postgres": func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "postgres"))) },
		"mysql":    func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "mysql"))) },
	}
	for name, cfg := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, cfg(t), false, 100, 37_000)
			var (
				wg            sync.WaitGroup
				paid, refused atomic.Int64
				otherMu       sync.Mutex
				other         []error
				p             = b.params(false)
			)
			p.Items[0].UnitPrice = 1000
			for range 100 {
				wg.Go(func() {
					q := *p
					o, _, err := b.e.Service("wallet_checkout").(*checkout.Service).Checkout(context.Background(), &q)
					switch {
					case err == nil && o.State == orderly.StatePaid:
						paid.Add(1)
					case orderly.ErrorCode(err) == orderly.EINSUFFICIENT:
						refused.Add(1)
					default:
						otherMu.Lock()
						other = append(other, fmt.Errorf("order %+v: %w", o, err))
						otherMu.Unlock()
					}
				})
			}
			wg.Wait()
			if paid.Load() != 37 || refused.Load() != 63 || len(other) > 0 {
				t.Fatalf("paid %d, refused %d, other %v", paid.Load(), refused.Load(), errors.Join(other...))
			}
			s := b.read(t)
			if s.balance != 0 || s.platform != 37_000 || *s.stock != (orderly.Stock{SKU: sku, Available: 63, Sold: 37}) {
				t.Errorf("balance %d platform %d stock %+v", s.balance, s.platform, *s.stock)
			}
		})
	}
}

// TestCheckoutConcurrentAnswers: 10 concurrent checkouts of 1000 each against 4 units of
// stock (and a balance for all; on SQLite joined into one transaction): exactly 4 are paid and 6 refused
// out-of-stock with their orders closed out_of_stock; the wallet paid 4 000 and nothing
// more; and each paid checkout's answer, the order its pay step kept, is the order as
// stored (its JSON, byte for byte); on SQLite, and on PostgreSQL and MariaDB when their
// URLs are set.
func TestCheckoutConcurrentAnswers(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) engine.Config{
		"sqlite":   sqliteConfig,
		"postgres": func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "postgres"))) },
		"mysql":    func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "mysql"))) },
	}
	for name, cfg := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, cfg(t), false, 4, 100_000)
			ctx := t.Context()
			type answer struct {
				o   *orderly.Order
				err error
			}
			answers := make([]answer, 10)
			var wg sync.WaitGroup
			for i := range answers {
				wg.Go(func() {
					p := b.params(false)
					p.Items[0].UnitPrice = 1000
					o, _, err := b.e.Service("wallet_checkout").(*checkout.Service).Checkout(ctx, p)
					answers[i] = answer{o, err}
				})
			}
			wg.Wait()
			paid := 0
			for _, a := range answers {
				switch {
				case a.err == nil:
					paid++
					stored, err := b.e.Orders().Order(ctx, a.o.ID)
					if err != nil {
						t.Fatal(err)
					}
					got, _ := json.Marshal(a.o)
					want, _ := json.Marshal(stored)
					if string(got) != string(want) || a.o.State != orderly.StatePaid {
						t.Fatalf("answered %s\nstored   %s", got, want)
					}
				case orderly.ErrorCode(a.err) == orderly.EOUTOFSTOCK:
				default:
					t.Fatalf("checkout: %v", a.err)
				}
			}
			if paid != 4 {
				t.Fatalf("%d paid, want 4", paid)
			}
			var all []*orderly.Order
			if err := b.e.Store().Read(ctx, func(tx store.Tx) (err error) {
				all, err = tx.OrderList(ctx, &store.ListParams{Limit: 100})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			closed := 0
			for _, o := range all {
				switch {
				case o.State == orderly.StateClosed && o.CloseReason == orderly.CloseReasonOutOfStock:
					closed++
				case o.State != orderly.StatePaid:
					t.Fatalf("order %s is %s (%s), want paid or closed out_of_stock", o.ID, o.State, o.CloseReason)
				}
			}
			s := b.read(t)
			if closed != 6 || s.balance != 96_000 || s.platform != 4_000 || *s.stock != (orderly.Stock{SKU: sku, Sold: 4}) {
				t.Errorf("%d closed, balance %d platform %d stock %+v", closed, s.balance, s.platform, *s.stock)
			}
		})
	}
}

// TestCheckoutCompensationGivesBackForTheNext: while a checkout holds sku-block's stock
// row, A, whose buyer has no wallet, and then B queue for the one unit of sku, and two
// more checkouts of one buyer queue beside them. Whoever of A and B comes second is not
// refused for what A held: A's compensation gives the unit back, so B is paid and A is
// refused (insufficient-funds, or out-of-stock when B took the unit first); and the
// buyer's wallet version grows by one per debit (on SQLite also for debits joined into
// one transaction).
func TestCheckoutCompensationGivesBackForTheNext(t *testing.T) {
	t.Parallel()
	dbs := map[string]func(t *testing.T) engine.Config{
		"sqlite":   sqliteConfig,
		"postgres": func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "postgres"))) },
		"mysql":    func(t *testing.T) engine.Config { return config(t, testdb.Fresh(t, testdb.URL(t, "mysql"))) },
	}
	for name, cfg := range dbs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, cfg(t), false, 1, 100_000)
			ctx := t.Context()
			e := b.e
			if _, err := e.Orders().SetStock(ctx, "sku-block", 10); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Orders().SetStock(ctx, "sku-2", 10); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Wallets().Credit(ctx, &orderly.WalletMoveParams{UserID: "rich", Currency: "USD", Amount: 100000, IdempotencyKey: "r"}); err != nil {
				t.Fatal(err)
			}
			ver := func() int64 {
				var v int64
				_ = e.Store().Read(ctx, func(tx store.Tx) error {
					a, err := tx.WalletAccountGet(ctx, orderly.UserAccount("rich", "USD").ID())
					if err == nil {
						v = a.Version
					}
					return err
				})
				return v
			}
			v0 := ver()
			locked := make(chan struct{})
			go func() {
				_ = e.Store().InTx(context.Background(), func(tx store.Tx) error {
					_, _, err := tx.StockLockAvailable(context.Background(), "sku-block")
					close(locked)
					time.Sleep(500 * time.Millisecond)
					return err
				})
			}()
			<-locked
			mk := func(user, s string) *orderly.CreateOrderParams {
				return &orderly.CreateOrderParams{UserID: user, Currency: "USD", PaymentMethod: orderly.PaymentMethodWallet,
					Items: []orderly.Item{{SKU: s, Quantity: 1, UnitPrice: 100}}}
			}
			var wg sync.WaitGroup
			res := map[string]error{}
			var mu sync.Mutex
			run := func(tag string, p *orderly.CreateOrderParams) {
				wg.Go(func() {
					_, _, err := e.Service("wallet_checkout").(*checkout.Service).Checkout(ctx, p)
					mu.Lock()
					res[tag] = err
					mu.Unlock()
				})
			}
			run("blocker", mk("rich", "sku-block"))
			time.Sleep(100 * time.Millisecond)
			run("A-poor", mk("poor", sku))
			time.Sleep(30 * time.Millisecond)
			run("B-rich", mk("rich", sku))
			time.Sleep(30 * time.Millisecond)
			run("B2-rich", mk("rich", "sku-2"))
			time.Sleep(30 * time.Millisecond)
			run("B3-rich", mk("rich", "sku-2"))
			wg.Wait()
			for _, k := range []string{"blocker", "B-rich", "B2-rich", "B3-rich"} {
				if res[k] != nil {
					t.Errorf("%s: %v, want paid", k, res[k])
				}
			}
			if c := orderly.ErrorCode(res["A-poor"]); c != orderly.EINSUFFICIENT && c != orderly.EOUTOFSTOCK {
				t.Errorf("A-poor: %v, want insufficient-funds or out-of-stock", res["A-poor"])
			}
			if v := ver(); v != v0+4 {
				t.Errorf("wallet version %d -> %d, want +4 (one per debit)", v0, v)
			}
		})
	}
}
