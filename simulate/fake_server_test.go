package simulate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// fakeOptions configures a fakeServer; the fault switches make it break an invariant on
// purpose, to prove the run detects it.
type fakeOptions struct {
	grace time.Duration // close_at = expires_at + grace
	// earlyClose closes orders this long before their close_at (breaks I1).
	earlyClose time.Duration
	// lateClose closes orders no sooner than this long after their close_at (a dead timer
	// carried by a sweep: breaks a lateness bound).
	lateClose time.Duration
	// keepLatePayments leaves a success for a closed order succeeded instead of refunding
	// it (breaks I2).
	keepLatePayments bool
	// leakCoupons never releases the coupon of a closed order (breaks I3).
	leakCoupons bool
	// hideLatePayments refunds a success for a closed order but leaves the payment out of
	// the order's payment list (breaks I2: the money is not accounted for).
	hideLatePayments bool
	// refundTwice records every refund twice, as a server that lost its idempotency would
	// (breaks I4).
	refundTwice bool
	// confirmRefundsOnRead leaves a new refund requested and the order's pay_status as it
	// was; the next read of the order's refunds confirms them first (refund succeeded and
	// pay_status partially_refunded in one step), as a relay that applies the gateway's
	// confirmation between a reader's GET of the order and its GET of the refunds. A
	// correct server, slow at the worst moment.
	confirmRefundsOnRead bool
	// keepPayStatus confirms refunds without moving the order's pay_status (breaks I4).
	keepPayStatus bool
	// onOrder, when set, is called with the number of order requests so far, under the
	// server's lock.
	onOrder func(n int)
	// groups serves the group-buy contract too (fake_group_test.go), with the faults of
	// groupFaults.
	groups *groupFaults
	// refuse, when set, is asked (under the server's lock) for every valid new order
	// whether to refuse it as out of stock, whatever it asks for.
	refuse func() bool
	// slowWrites holds the server's lock this long at the start of every POST, before it
	// reads the clock: a server that serves at most 1/slowWrites writes per second.
	slowWrites time.Duration
	// stallPayments holds every payment start this long before serving it, as an instance
	// stopped with SIGSTOP (or a queue ahead of it) holds the requests sent to it.
	stallPayments time.Duration
}

// fakeServer implements just enough of the HTTP contract in memory to drive the simulator:
// it tests the driver, not the real server. Due orders are closed lazily, at the start of
// every request, so no goroutine runs behind the handlers. One mutex serializes everything.
type fakeServer struct {
	opts   fakeOptions
	secret []byte

	mu         sync.Mutex
	seq        int
	stock      map[string]*orderly.Stock
	coupons    map[string]*orderly.Coupon
	orders     map[string]*orderly.Order
	payments   map[string]*orderly.Payment
	byOrder    map[string][]*orderly.Payment
	reserved   map[string]bool              // order id → reservations still held
	requests   map[string]int               // by route, for assertions
	byKey      map[string]keyed             // user + "\x00" + Idempotency-Key → the order it created
	refunds    map[string][]*orderly.Refund // by order id
	refundKeys map[string]*orderly.Refund   // order id + "\x00" + Idempotency-Key
	mux        *http.ServeMux
	gb         *fakeGroups // with opts.groups
}

// keyed is an order created with an Idempotency-Key, and the body that created it.
type keyed struct {
	orderID string
	body    string
}

func newFakeServer(t *testing.T, secret []byte, opts fakeOptions) (*fakeServer, *httptest.Server) {
	f := &fakeServer{
		opts: opts, secret: secret,
		stock: map[string]*orderly.Stock{}, coupons: map[string]*orderly.Coupon{},
		orders: map[string]*orderly.Order{}, payments: map[string]*orderly.Payment{},
		byOrder: map[string][]*orderly.Payment{}, reserved: map[string]bool{}, requests: map[string]int{},
		byKey: map[string]keyed{}, refunds: map[string][]*orderly.Refund{}, refundKeys: map[string]*orderly.Refund{},
	}
	mux := http.NewServeMux()
	f.mux = mux
	for pattern, h := range map[string]func(w http.ResponseWriter, r *http.Request, now time.Time){
		"PUT /v1/inventory/{sku}":       f.setStock,
		"GET /v1/inventory/{sku}":       f.getStock,
		"POST /v1/coupons":              f.createCoupon,
		"GET /v1/coupons/{id}":          f.getCoupon,
		"POST /v1/orders":               f.createOrder,
		"GET /v1/orders/{id}":           f.getOrder,
		"POST /v1/orders/{id}/cancel":   f.cancel,
		"POST /v1/orders/{id}/payments": f.startPayment,
		"GET /v1/orders/{id}/payments":  f.listPayments,
		"POST /v1/orders/{id}/refunds":  f.createRefund,
		"GET /v1/orders/{id}/refunds":   f.listRefunds,
		"POST /v1/payments/callback":    f.callback,
	} {
		f.handle(pattern, h)
	}
	if opts.groups != nil {
		f.addGroupRoutes()
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

// handle serves pattern with h under the server's lock, after closing what is due.
func (f *fakeServer) handle(pattern string, h func(w http.ResponseWriter, r *http.Request, now time.Time)) {
	f.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if f.opts.stallPayments > 0 && pattern == "POST /v1/orders/{id}/payments" {
			time.Sleep(f.opts.stallPayments) // outside the lock: only the payments stall
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.opts.slowWrites > 0 && r.Method == http.MethodPost {
			time.Sleep(f.opts.slowWrites)
		}
		f.requests[pattern]++
		now := time.Now().UTC().Truncate(time.Millisecond)
		if f.gb != nil {
			f.gb.due(now)
		}
		f.closeDue(now)
		h(w, r, now)
	})
}

func (f *fakeServer) id(prefix string) string {
	f.seq++
	return fmt.Sprintf("%s_%d", prefix, f.seq)
}

// closeDue closes every open, unpaid order whose close_at passed; an attempt in flight is
// inspected first (the fake gateway says it never completed) and cancelled.
func (f *fakeServer) closeDue(now time.Time) {
	for _, o := range f.orders {
		if o.State != orderly.StatePendingPayment || now.Before(o.CloseAt.Add(f.opts.lateClose-f.opts.earlyClose)) {
			continue
		}
		if p := f.payments[o.CurrentPaymentID]; p != nil && p.State == orderly.PaymentInitiated {
			p.State, p.FailReason = orderly.PaymentFailed, "cancelled at close"
		}
		f.closeOrder(o, orderly.CloseReasonPaymentTimeout, now)
	}
}

func (f *fakeServer) closeOrder(o *orderly.Order, reason orderly.CloseReason, now time.Time) {
	o.State, o.CloseReason, o.ClosedAt = orderly.StateClosed, reason, &now
	o.Version++
	if f.reserved[o.ID] {
		for _, it := range o.Items {
			s := f.stock[it.SKU]
			s.Held -= it.Quantity
			s.Available += it.Quantity
		}
		f.reserved[o.ID] = false
	}
	if c := f.coupons[o.CouponID]; c != nil && c.State == orderly.CouponFrozen && c.OrderID == o.ID && !f.opts.leakCoupons {
		c.State, c.OrderID = orderly.CouponAvailable, ""
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(&problem{Type: "https://orderly.dev/problems/" + code, Title: code, Status: status, Detail: detail})
}

// decodeStrict decodes the body like the real server: unknown fields are refused.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, err.Error())
		return false
	}
	return true
}

func (f *fakeServer) setStock(w http.ResponseWriter, r *http.Request, _ time.Time) {
	var req struct {
		Available *int64 `json:"available"`
	}
	if !decodeStrict(w, r, &req) {
		return
	}
	if req.Available == nil || *req.Available < 0 {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "available: must be >= 0")
		return
	}
	sku := r.PathValue("sku")
	s := f.stock[sku]
	if s == nil {
		s = &orderly.Stock{SKU: sku}
		f.stock[sku] = s
	}
	s.Available = *req.Available
	writeJSON(w, http.StatusOK, s)
}

func (f *fakeServer) getStock(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if s := f.stock[r.PathValue("sku")]; s != nil {
		writeJSON(w, http.StatusOK, s)
		return
	}
	writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such sku")
}

func (f *fakeServer) createCoupon(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req couponRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	c := &orderly.Coupon{ID: f.id("cpn"), UserID: req.UserID, AmountOff: req.AmountOff, Currency: req.Currency,
		State: orderly.CouponAvailable, CreatedAt: now}
	f.coupons[c.ID] = c
	writeJSON(w, http.StatusCreated, c)
}

func (f *fakeServer) getCoupon(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if c := f.coupons[r.PathValue("id")]; c != nil {
		writeJSON(w, http.StatusOK, c)
		return
	}
	writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such coupon")
}

func (f *fakeServer) createOrder(w http.ResponseWriter, r *http.Request, now time.Time) {
	if f.opts.onOrder != nil {
		f.opts.onOrder(f.requests["POST /v1/orders"])
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req orderRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if k, ok := f.byKey[req.UserID+"\x00"+key]; key != "" && ok {
		if k.body != string(body) {
			writeProblem(w, http.StatusConflict, orderly.EIDEMPOTENCY, "key used for another request")
			return
		}
		writeJSON(w, http.StatusOK, f.orders[k.orderID])
		return
	}
	if req.UserID == "" || len(req.Items) == 0 || req.Currency != "USD" || req.PaymentTimeoutSeconds < 1 {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "bad order")
		return
	}
	if f.opts.refuse != nil && f.opts.refuse() {
		writeProblem(w, http.StatusConflict, orderly.EOUTOFSTOCK, "refused")
		return
	}
	var amount int64
	for _, it := range req.Items {
		s := f.stock[it.SKU]
		if s == nil || s.Available < it.Quantity {
			writeProblem(w, http.StatusConflict, orderly.EOUTOFSTOCK, "not enough "+it.SKU)
			return
		}
		amount += it.Quantity * it.UnitPrice
	}
	var c *orderly.Coupon
	if req.CouponID != "" {
		c = f.coupons[req.CouponID]
		if c == nil || c.State != orderly.CouponAvailable || c.UserID != req.UserID || c.AmountOff >= amount {
			writeProblem(w, http.StatusConflict, orderly.ECOUPONUNAVAIL, "coupon unavailable")
			return
		}
		amount -= c.AmountOff
	}
	o := &orderly.Order{ID: f.id("ord"), UserID: req.UserID, Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
		PayStatus: orderly.PayUnpaid, Items: req.Items, Amount: amount, Currency: req.Currency, CouponID: req.CouponID,
		CreatedAt: now, ExpiresAt: now.Add(time.Duration(req.PaymentTimeoutSeconds) * time.Second), Version: 1}
	o.CloseAt = o.ExpiresAt.Add(f.opts.grace)
	for _, it := range req.Items {
		s := f.stock[it.SKU]
		s.Available -= it.Quantity
		s.Held += it.Quantity
	}
	f.reserved[o.ID] = true
	if c != nil {
		c.State, c.OrderID = orderly.CouponFrozen, o.ID
	}
	f.orders[o.ID] = o
	if key != "" {
		f.byKey[req.UserID+"\x00"+key] = keyed{orderID: o.ID, body: string(body)}
	}
	writeJSON(w, http.StatusCreated, o)
}

func (f *fakeServer) getOrder(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if o := f.orders[r.PathValue("id")]; o != nil {
		writeJSON(w, http.StatusOK, o)
		return
	}
	writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
}

func (f *fakeServer) cancel(w http.ResponseWriter, r *http.Request, now time.Time) {
	o := f.orders[r.PathValue("id")]
	switch {
	case o == nil:
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
	case o.State != orderly.StatePendingPayment || o.PayStatus == orderly.PayPaid:
		writeProblem(w, http.StatusConflict, orderly.EILLEGAL, "not pending")
	default:
		f.closeOrder(o, orderly.CloseReasonBuyerCancelled, now)
		writeJSON(w, http.StatusOK, o)
	}
}

func (f *fakeServer) startPayment(w http.ResponseWriter, r *http.Request, now time.Time) {
	if b, _ := io.ReadAll(r.Body); len(bytes.TrimSpace(b)) > 0 {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "the simulator sends no body")
		return
	}
	o := f.orders[r.PathValue("id")]
	switch {
	case o == nil:
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
	case o.State != orderly.StatePendingPayment || !now.Before(o.ExpiresAt) || o.PayStatus == orderly.PayPaid:
		writeProblem(w, http.StatusConflict, orderly.ENOTPAYABLE, "not payable")
	default:
		p := &orderly.Payment{ID: f.id("pay"), OrderID: o.ID, Attempt: int64(len(f.byOrder[o.ID]) + 1), Channel: "sim",
			Amount: o.Amount, Currency: o.Currency, State: orderly.PaymentInitiated, CreatedAt: now}
		f.payments[p.ID] = p
		f.byOrder[o.ID] = append(f.byOrder[o.ID], p)
		o.PayStatus, o.CurrentPaymentID = orderly.PayPaying, p.ID
		writeJSON(w, http.StatusCreated, p)
	}
}

func (f *fakeServer) listPayments(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if f.orders[r.PathValue("id")] == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
		return
	}
	ps := []*orderly.Payment{}
	for _, p := range f.byOrder[r.PathValue("id")] {
		if f.opts.hideLatePayments && p.State == orderly.PaymentRefunded {
			continue
		}
		ps = append(ps, p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"payments": ps})
}

func (f *fakeServer) callback(w http.ResponseWriter, r *http.Request, now time.Time) {
	body, _ := io.ReadAll(r.Body)
	if err := payment.Verify(f.secret, r.Header.Get(payment.SignatureHeader), body, now, payment.DefaultSignatureTolerance); err != nil {
		writeProblem(w, http.StatusUnauthorized, orderly.EUNAUTHORIZED, orderly.ErrorMessage(err))
		return
	}
	var cb callbackBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cb); err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, err.Error())
		return
	}
	if _, err := time.Parse(time.RFC3339, cb.OccurredAt); err != nil {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "occurred_at: "+err.Error())
		return
	}
	p := f.payments[cb.PaymentID]
	if p == nil || p.OrderID != cb.OrderID {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such payment")
		return
	}
	if p.Amount != cb.Amount || p.Currency != cb.Currency {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EAMOUNTMISMATCH, "amount mismatch")
		return
	}
	o := f.orders[p.OrderID]
	switch cb.Status {
	case orderly.CallbackSucceeded:
		switch {
		case p.State == orderly.PaymentSucceeded || p.State == orderly.PaymentRefundPending || p.State == orderly.PaymentRefunded:
			// duplicate
		case o.State == orderly.StatePendingPayment:
			p.State, p.ChannelTxnID, p.SucceededAt = orderly.PaymentSucceeded, cb.ChannelTxnID, &now
			o.State, o.PayStatus, o.PaidAt = orderly.StatePaid, orderly.PayPaid, &now
			o.Version++
			for _, it := range o.Items {
				s := f.stock[it.SKU]
				s.Held -= it.Quantity
				s.Sold += it.Quantity
			}
			f.reserved[o.ID] = false
			if c := f.coupons[o.CouponID]; c != nil && c.OrderID == o.ID {
				c.State = orderly.CouponUsed
			}
			if f.gb != nil {
				f.gb.paid(o, now)
			}
		case f.opts.keepLatePayments:
			p.State, p.ChannelTxnID, p.SucceededAt = orderly.PaymentSucceeded, cb.ChannelTxnID, &now
		default:
			p.State, p.ChannelTxnID, p.SucceededAt, p.RefundedAt = orderly.PaymentRefunded, cb.ChannelTxnID, &now, &now
		}
	case orderly.CallbackFailed, orderly.CallbackExpired:
		if p.State == orderly.PaymentInitiated {
			p.State, p.FailReason = orderly.PaymentFailed, cb.Status
			if o.State == orderly.StatePendingPayment && o.CurrentPaymentID == p.ID {
				o.PayStatus = orderly.PayFailed
			}
		}
	default:
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "bad status")
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"received": true})
}
