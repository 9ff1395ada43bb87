package simulate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
)

// flowWallet is the --flow name of the wallet checkout traffic.
const flowWallet = "wallet"

func init() {
	RegisterFlow(flowWallet, func() FlowDriver { return &walletFlow{} })
}

// walletFlow drives wallet checkouts (docs/flows/wallet-checkout.md): buyers whose wallets
// are credited with enough for only some of their checkouts, SKUs stocked for most but
// not all of the demand, one coupon per buyer named by two of their checkouts. Each
// checkout is one POST /v1/orders with payment_method wallet and an Idempotency-Key; the
// server's participants fail, slow down or lose their answers at the rates it was started
// with (internal/fault.Saga). At rest it checks I8 and money conservation (Check).
type walletFlow struct {
	*runner
	buyers    []*walletBuyer
	checkouts []*walletCheckout
	skus      map[string]int64 // SKU → units stocked

	sent, created, refused, errs, inProgress atomic.Int64

	mu     sync.Mutex
	codes  map[string]int // refusals by problem code
	result *WalletResult
}

// walletBuyer is a buyer, the credit given to their wallet and their coupon.
type walletBuyer struct {
	user   string
	credit int64
	coupon string
}

// walletCheckout is one planned checkout and what became of it.
type walletCheckout struct {
	index  int
	buyer  *walletBuyer
	item   orderly.Item
	coupon bool

	mu      sync.Mutex
	orderID string         // the order the checkout wrote (also its saga's id)
	answer  string         // "created", or the problem code of a refusal, or "error"
	first   *orderly.Order // as the 201 showed it
	final   *orderly.Order // at rest
	saga    string         // the saga's state at rest
}

// WalletResult is what the wallet flow did and found.
type WalletResult struct {
	Checkouts int `json:"checkouts"`
	Paid      int `json:"paid"`
	// Refused counts checkouts answered 409 (their orders closed), by problem code.
	Refused map[string]int `json:"refused"`
	// InProgress counts answers 503 (a first step waiting for its retry), resolved later
	// with the same Idempotency-Key.
	InProgress int `json:"in_progress"`
	// Sagas counts the checkouts' sagas at rest by state.
	Sagas map[string]int `json:"sagas"`
	// Credited and Debited are the money put into the buyers' wallets and taken by paid
	// checkouts, in minor units.
	Credited int64 `json:"credited"`
	Debited  int64 `json:"debited"`
}

// Plan implements FlowDriver: a buyer per four checkouts, each credited for 0 to all of
// their checkouts; five SKUs stocked for 90 % of their demand.
func (w *walletFlow) Plan(r *runner, orders int) {
	w.runner = r
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x77a11e7)) //nolint:gosec // a reproducible plan
	nb := max(1, orders/4)
	for i := range nb {
		w.buyers = append(w.buyers, &walletBuyer{user: fmt.Sprintf("%s-wallet-buyer-%d", r.prefix, i)})
	}
	demand := map[string]int64{}
	planned := make([][]*walletCheckout, nb)
	for i := range orders {
		b := i % nb
		c := &walletCheckout{index: i, buyer: w.buyers[b], item: orderly.Item{SKU: fmt.Sprintf("%s-wallet-sku-%d", r.prefix, rng.IntN(5)),
			Quantity: 1 + rng.Int64N(2), UnitPrice: 500 + 100*rng.Int64N(11)}}
		c.coupon = len(planned[b]) < 2 // the first two of a buyer's checkouts name their coupon
		planned[b] = append(planned[b], c)
		demand[c.item.SKU] += c.item.Quantity
		w.checkouts = append(w.checkouts, c)
	}
	for b, list := range planned {
		k := rng.IntN(len(list) + 1) // covers k of the buyer's checkouts (before coupons)
		for _, c := range list[:k] {
			w.buyers[b].credit += c.item.Quantity * c.item.UnitPrice
		}
	}
	w.skus = map[string]int64{}
	for sku, n := range demand {
		w.skus[sku] = max(1, n*9/10)
	}
	w.codes = map[string]int{}
}

// Seed implements FlowDriver: stock, credits and coupons.
func (w *walletFlow) Seed(ctx context.Context, r *runner) error {
	for sku, n := range w.skus {
		if err := r.c.setStock(ctx, sku, n); err != nil {
			return err
		}
		r.stocked(sku, n)
	}
	return forEach(ctx, len(w.buyers), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		b := w.buyers[i]
		if b.credit > 0 {
			body := map[string]any{"amount": b.credit, "currency": currency}
			if err := r.c.do(ctx, http.MethodPost, "/v1/wallets/"+url.PathEscape(b.user)+"/credits", body,
				http.Header{"Idempotency-Key": {r.prefix + "-credit"}}, nil); err != nil {
				return err
			}
		}
		cp, err := r.c.createCoupon(ctx, b.user, 100, currency)
		if err != nil {
			return err
		}
		b.coupon = cp.ID
		return nil
	})
}

// Drive implements FlowDriver: the checkouts at the flow's pace.
func (w *walletFlow) Drive(ctx context.Context, r *runner) {
	var wg sync.WaitGroup
	defer wg.Wait()
	rate := r.rate(len(w.checkouts))
	for i, c := range w.checkouts {
		if sleepUntil(ctx, r.sendStart.Add(time.Duration(float64(i)/rate*float64(time.Second)))) != nil {
			return
		}
		wg.Go(func() { w.checkout(ctx, c, true) })
	}
}

// checkout sends c's request (again, with the same key, when first is false: it then
// answers the order the first request wrote) and records the answer.
func (w *walletFlow) checkout(ctx context.Context, c *walletCheckout, first bool) {
	if first {
		w.sent.Add(1)
	}
	req := &walletOrderRequest{UserID: c.buyer.user, Items: []orderly.Item{c.item}, Currency: currency, PaymentMethod: orderly.PaymentMethodWallet,
		PaymentTimeoutSeconds: 600}
	if c.coupon {
		req.CouponID = c.buyer.coupon
	}
	o := &orderly.Order{}
	_, err := w.c.send(ctx, http.MethodPost, "/v1/orders", req, http.Header{"Idempotency-Key": {fmt.Sprintf("%s-wallet-%d", w.prefix, c.index)}}, o)
	if first {
		w.answered()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var he *httpError
	switch {
	case err == nil:
		c.orderID = o.ID
		if first {
			c.answer, c.first = "created", o
			w.created.Add(1)
		}
	case ctx.Err() != nil:
		if first {
			c.answer = "error"
			w.errs.Add(1)
		}
	case errors.As(err, &he) && he.Status == http.StatusConflict && he.Problem != nil:
		if first {
			c.answer = he.code()
			w.refused.Add(1)
			w.mu.Lock()
			w.codes[c.answer]++
			w.mu.Unlock()
		}
		// "… order <id> is closed (…)"; none when the refusal came before any order.
		if id, _, ok := strings.Cut(after(he.Problem.Detail, "order "), " is "); ok {
			c.orderID = id
		}
	case errors.As(err, &he) && he.Status == http.StatusServiceUnavailable:
		if first {
			c.answer = "in_progress"
			w.inProgress.Add(1)
		}
	default:
		if first {
			c.answer = "error"
			w.errs.Add(1)
		}
		w.httpProblem("wallet checkout %d: %v", c.index, err)
	}
}

func after(s, sep string) string {
	if _, rest, ok := strings.Cut(s, sep); ok {
		return rest
	}
	return ""
}

// walletOrderRequest is the body of a wallet checkout.
type walletOrderRequest struct {
	UserID                string         `json:"user_id"`
	Items                 []orderly.Item `json:"items"`
	Currency              string         `json:"currency"`
	CouponID              string         `json:"coupon_id,omitempty"`
	PaymentMethod         string         `json:"payment_method"`
	PaymentTimeoutSeconds int64          `json:"payment_timeout_seconds"`
}

// LastDeadline implements FlowDriver: checkouts have no deadline of their own to wait for
// (their orders are paid or closed by their sagas, 600 s before their payment deadline).
func (w *walletFlow) LastDeadline() time.Time { return time.Now() }

// Settle implements FlowDriver: every checkout's saga has ended or is stuck; a checkout
// answered 503 is asked again with its key until its order exists.
func (w *walletFlow) Settle(ctx context.Context, r *runner) bool {
	done := true
	for _, c := range w.checkouts {
		c.mu.Lock()
		id, state := c.orderID, c.saga
		c.mu.Unlock()
		if state == "succeeded" || state == "compensated" || ctx.Err() != nil {
			continue
		}
		// No order known yet: the answer was 503 (a first step waits for its retry), or
		// none at all (an instance died with the request), and the server may have begun
		// the checkout: the same key answers its order, or begins it now.
		if id == "" {
			w.checkout(ctx, c, false)
			done = false
			continue
		}
		var s struct {
			State string `json:"state"`
		}
		if err := r.c.do(ctx, http.MethodGet, "/v1/sagas/"+url.PathEscape(id), nil, nil, &s); err != nil {
			done = false
			continue
		}
		c.mu.Lock()
		c.saga = s.State
		c.mu.Unlock()
		if s.State != "succeeded" && s.State != "compensated" && s.State != "stuck" {
			done = false
		}
	}
	return done
}

// walletEntry is one entry of GET /v1/wallets/{user_id}.
type walletEntry struct {
	Kind   string `json:"kind"`
	Amount int64  `json:"amount"`
}

// Check implements FlowDriver. Per checkout (I8): its saga ended — succeeded with its order
// paid, or compensated with its order closed (for a 409, with the reason its code names) —
// or is stuck (counted; the server alerts). A 201 answered paid stays paid. Per buyer (money
// conservation, no double debit): the wallet holds credit − Σ paid amounts, nothing held,
// its entries sum to its balance, and its debits less its credit-backs are the paid
// amounts. Per SKU: nothing held at rest, sold = the paid checkouts' units, stocked =
// available + sold. Per coupon: used exactly when one paid checkout named it. The ledger
// as a whole (every transfer sums to zero, system accounts included) is checked by the
// database check (verify.CheckWallets) when the run has the Store.
func (w *walletFlow) Check(r *runner, res *Result) {
	ctx := context.Background()
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	wr := &WalletResult{Checkouts: len(w.checkouts), Refused: map[string]int{}, Sagas: map[string]int{}, InProgress: int(w.inProgress.Load())}
	res.Sent += int(w.sent.Load())
	res.Errors += int(w.errs.Load())
	w.mu.Lock()
	for code, n := range w.codes {
		wr.Refused[code] = n
		switch code {
		case orderly.EOUTOFSTOCK:
			res.OutOfStock += n
		case orderly.ECOUPONUNAVAIL:
			res.CouponUnavailable += n
		default:
			res.Rejected[code] += n
		}
	}
	w.mu.Unlock()
	paidBy := map[*walletBuyer]int64{}
	soldOf := map[string]int64{}
	couponUse := map[string]int{}
	reasons := map[string]orderly.CloseReason{orderly.EINSUFFICIENT: orderly.CloseReasonInsufficientFunds,
		orderly.EOUTOFSTOCK: orderly.CloseReasonOutOfStock, orderly.ECOUPONUNAVAIL: orderly.CloseReasonCouponUnavailable}
	for _, c := range w.checkouts {
		if c.orderID == "" {
			if c.answer == "created" || c.answer == "in_progress" {
				violate("I8: wallet checkout %d (%s) has no order at rest", c.index, c.answer)
			}
			continue
		}
		o, err := r.c.order(ctx, c.orderID)
		if err != nil {
			violate("HTTP: wallet checkout %d: order %s: %v", c.index, c.orderID, err)
			continue
		}
		c.final = o
		// Orders counts the checkouts answered with their order (201, or 503 then the order
		// by its key); a refused one (409) wrote an order too, closed, counted in Rejected.
		counted := c.answer == "created" || c.answer == "in_progress"
		if counted {
			res.Orders++
		}
		wr.Sagas[c.saga]++
		switch {
		case c.saga == "succeeded" && o.State == orderly.StatePaid:
			res.Paid++
			wr.Paid++
			paidBy[c.buyer] += o.Amount
			soldOf[c.item.SKU] += c.item.Quantity
			if o.CouponID != "" {
				couponUse[o.CouponID]++
			}
		case c.saga == "compensated" && o.State == orderly.StateClosed:
			if counted {
				res.Closed++
			}
		case c.saga == "stuck":
			violate("I8: wallet checkout %d: saga %s stuck (order %s %s); the server alerted, an admin re-drive is due", c.index, o.ID, o.State, o.PayStatus)
		default:
			violate("I8: wallet checkout %d: saga %s is %q at rest but its order is %s (%s)", c.index, o.ID, c.saga, o.State, o.CloseReason)
		}
		if c.first != nil && c.first.State == orderly.StatePaid && o.State != orderly.StatePaid {
			violate("I2: wallet checkout %d was answered paid, order %s is %s at rest", c.index, o.ID, o.State)
		}
		if want, ok := reasons[c.answer]; ok && (o.State != orderly.StateClosed || o.CloseReason != want) {
			violate("refused: wallet checkout %d was refused %s but order %s is %s (%s)", c.index, c.answer, o.ID, o.State, o.CloseReason)
		}
	}
	for _, b := range w.buyers {
		wr.Credited += b.credit
		wr.Debited += paidBy[b]
		var wal struct {
			Balance int64         `json:"balance"`
			Held    int64         `json:"held"`
			Entries []walletEntry `json:"entries"`
		}
		err := r.c.do(ctx, http.MethodGet, "/v1/wallets/"+url.PathEscape(b.user)+"?currency="+currency+"&limit=500", nil, nil, &wal)
		var he *httpError
		if errors.As(err, &he) && he.Status == http.StatusNotFound && b.credit == 0 && paidBy[b] == 0 {
			continue // never credited, never paid: no wallet
		} else if err != nil {
			violate("HTTP: wallet of %s: %v", b.user, err)
			continue
		}
		var sum, moved int64
		for _, e := range wal.Entries {
			sum += e.Amount
			if e.Kind == string(orderly.TransferDebit) || e.Kind == string(orderly.TransferRefund) {
				moved += e.Amount
			}
		}
		if want := b.credit - paidBy[b]; wal.Balance != want || wal.Held != 0 || sum != wal.Balance || moved != -paidBy[b] {
			violate("I4 money: wallet of %s: balance %d held %d, entries sum %d, debits less credit-backs %d; want balance %d = credit %d − paid %d",
				b.user, wal.Balance, wal.Held, sum, moved, want, b.credit, paidBy[b])
		}
	}
	for sku, n := range w.skus {
		st, err := r.c.stock(ctx, sku)
		if err != nil {
			violate("HTTP: stock of %s: %v", sku, err)
			continue
		}
		if st.Held != 0 || st.Sold != soldOf[sku] || st.Available+st.Sold != n {
			violate("I4: stock of %s: available %d held %d sold %d; want held 0, sold %d (the paid checkouts), %d stocked",
				sku, st.Available, st.Held, st.Sold, soldOf[sku], n)
		}
	}
	for _, b := range w.buyers {
		cp, err := r.c.coupon(ctx, b.coupon)
		if err != nil {
			violate("HTTP: coupon %s: %v", b.coupon, err)
			continue
		}
		used := couponUse[b.coupon]
		if used > 1 || (used == 1) != (cp.State == orderly.CouponUsed) || (used == 0 && cp.State != orderly.CouponAvailable) {
			violate("I3: coupon %s is %s; %d paid checkouts used it", b.coupon, cp.State, used)
		}
	}
	w.result = wr
	res.Wallet = wr
}

// Payments implements FlowDriver: wallet payments never reach the gateway.
func (w *walletFlow) Payments() ([]FinalPayment, []string) { return nil, nil }

// Progress implements FlowDriver.
func (w *walletFlow) Progress() string {
	return fmt.Sprintf("sent %d/%d created %d refused %d", w.sent.Load(), len(w.checkouts), w.created.Load(), w.refused.Load())
}
