package simulate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
)

// Refund traffic: a share of the orders whose buyer pays get one or two partial refunds
// from the merchant soon after the payment, some of them returning one unit to stock. They
// never add up to the whole amount, so each such order ends paid, partially_refunded.
const (
	refundShare       = 0.30 // share of orders planned to be refunded in part (if they end paid)
	twoRefundsShare   = 0.40 // share of those that get a second refund
	restockShare      = 0.50 // share of refunds that return one unit of a line to stock
	refundMinPermille = 100  // each refund is 10 %–40 % of the order's amount
	refundMaxPermille = 400
)

// plannedRefund is one partial refund of a planned order.
type plannedRefund struct {
	permille int64 // of the order's amount, in 1/1000
	restock  bool  // return one unit of a line to stock
	line     int   // which line, when restock
	delay    time.Duration
}

// planRefunds draws the refunds of the plan's orders from their own stream of the seed,
// so that the rest of the plan is the same as without refunds.
func planRefunds(seed int64, p *plan, timeout time.Duration) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7265_6675_6e64_7321)) //nolint:gosec // "refunds!": a reproducible plan, not a secret
	for _, po := range p.orders {
		if rng.Float64() >= refundShare {
			continue
		}
		n := 1
		if rng.Float64() < twoRefundsShare {
			n = 2
		}
		for k := range n {
			pr := plannedRefund{
				permille: refundMinPermille + rng.Int64N(refundMaxPermille-refundMinPermille+1),
				restock:  rng.Float64() < restockShare,
				delay:    time.Duration(rng.Float64() * 0.05 * float64(timeout)),
			}
			// The first refund restocks from the first line, the second from the last:
			// a line of one unit is never restocked twice.
			if k == 1 {
				pr.line = len(po.items) - 1
				if pr.line == 0 && po.items[0].Quantity == 1 && po.refunds[0].restock {
					pr.restock = false
				}
			}
			po.refunds = append(po.refunds, pr)
		}
	}
}

// refundRequest is the body of POST /v1/orders/{id}/refunds.
type refundRequest struct {
	Amount  int64                `json:"amount"`
	Items   []orderly.RefundItem `json:"items,omitempty"`
	Restock bool                 `json:"restock,omitempty"`
	Reason  string               `json:"reason,omitempty"`
}

// createRefund asks for a refund with an Idempotency-Key, so a try sent again after no
// answer never refunds twice.
func (c *client) createRefund(ctx context.Context, orderID string, req *refundRequest, key string) (*orderly.Refund, error) {
	f := &orderly.Refund{}
	path := "/v1/orders/" + url.PathEscape(orderID) + "/refunds"
	_, err := c.send(ctx, http.MethodPost, path, req, http.Header{"Idempotency-Key": {key}}, f)
	if err == nil && f.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: path, Status: http.StatusCreated, Err: errors.New("answer has no refund id")}
	}
	return f, err
}

func (c *client) refunds(ctx context.Context, orderID string) ([]*orderly.Refund, error) {
	var out struct {
		Refunds []*orderly.Refund `json:"refunds"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(orderID)+"/refunds", nil, nil, &out)
	return out.Refunds, err
}

// refund plays the merchant: once the buyer's payment was acknowledged, it sends the
// order's planned partial refunds, one after the other.
func (r *standardFlow) refund(ctx context.Context, t *tracked) {
	if t.successID == "" || len(t.po.refunds) == 0 {
		return
	}
	for k, pr := range t.po.refunds {
		if sleepUntil(ctx, time.Now().Add(pr.delay)) != nil {
			return
		}
		req := &refundRequest{Amount: max(1, t.order.Amount*pr.permille/1000), Reason: "simulated partial refund"}
		if pr.restock {
			req.Items, req.Restock = []orderly.RefundItem{{SKU: t.po.items[pr.line].SKU, Quantity: 1}}, true
		}
		f, err := r.c.createRefund(ctx, t.order.ID, req, fmt.Sprintf("%s-order-%d-refund-%d", r.prefix, t.po.index, k))
		var he *httpError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &he) && he.code() == orderly.EILLEGAL:
			// The order was not paid after all (a pay/close race): nothing to refund.
			return
		case err != nil:
			t.note("HTTP: refund %d of order %s (%s): %v", k+1, t.order.ID, t.po.behaviour, err)
			return
		case f.Amount != req.Amount || f.OrderID != t.order.ID || f.Restock != req.Restock:
			t.note("HTTP: refund %d of order %s answered %d for order %s (restock %v), want %d (restock %v)",
				k+1, t.order.ID, f.Amount, f.OrderID, f.Restock, req.Amount, req.Restock)
		}
		t.refunds = append(t.refunds, f)
		r.refundAcks.Add(1)
	}
}

// refreshRefunds reads the refunds of an order that has any and reports whether they all
// left requested (the gateway confirmed or refused each).
func (r *standardFlow) refreshRefunds(ctx context.Context, t *tracked) bool {
	if len(t.refunds) == 0 && (t.final == nil || t.final.RefundedAmount == 0) {
		return true
	}
	fs, err := r.c.refunds(ctx, t.order.ID)
	if err != nil {
		if ctx.Err() == nil {
			r.httpProblem("read refunds of order %s: %v", t.order.ID, err)
		}
		return false
	}
	t.finalRefunds = fs
	return !slices.ContainsFunc(fs, func(f *orderly.Refund) bool { return f.State == orderly.RefundRequested })
}

// restocked returns the units of sku that the order's refunds returned to stock: those of
// restocking refunds that succeeded (units go back when the gateway confirms the refund;
// a failed one returned none).
func (t *tracked) restocked(sku string) int64 {
	var n int64
	for _, f := range t.finalRefunds {
		if !f.Restock || f.State != orderly.RefundSucceeded {
			continue
		}
		for _, it := range f.Items {
			if it.SKU == sku {
				n += it.Quantity
			}
		}
	}
	return n
}

// checkMoney checks I4 for money on an order at rest: captured − refunded (payments
// refunded whole and refunds the gateway confirmed) is what the final state says — the
// amount less its refunds for paid, shipped and completed orders, 0 for closed and
// refunded ones; every refund the merchant was told of succeeded once, for its amount, and
// no other was made; refunded_amount and pay_status agree; with Config.GatewayLedger, each
// refund moved money at the gateway once, under its own id, for its amount.
func (r *standardFlow) checkMoney(t *tracked) []string {
	o, b := t.final, t.po.behaviour
	var out []string
	var captured, refunded, succeeded, notFailed int64
	for _, p := range t.finalPayments {
		switch p.State {
		case orderly.PaymentSucceeded, orderly.PaymentRefundPending:
			captured += p.Amount
		case orderly.PaymentRefunded:
			captured += p.Amount
			refunded += p.Amount
		}
	}
	for _, f := range t.finalRefunds {
		if f.State == orderly.RefundSucceeded {
			succeeded += f.Amount
		}
		if f.State != orderly.RefundFailed {
			notFailed += f.Amount
		}
	}
	refunded += succeeded
	want, check := int64(0), true
	switch {
	case paidLike(o.State):
		want = o.Amount - succeeded
	case o.State == orderly.StateClosed, o.State == orderly.StateRefunded:
	default:
		check = false
	}
	if check && captured-refunded != want {
		out = append(out, fmt.Sprintf("I4: order %s (%s) is %s: captured %d − refunded %d = %d, want %d",
			o.ID, b, o.State, captured, refunded, captured-refunded, want))
	}
	for _, ack := range t.refunds {
		i := slices.IndexFunc(t.finalRefunds, func(f *orderly.Refund) bool { return f.ID == ack.ID })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("I4: order %s (%s): refund %s was acknowledged but is not listed", o.ID, b, ack.ID))
		case t.finalRefunds[i].State != orderly.RefundSucceeded || t.finalRefunds[i].Amount != ack.Amount:
			f := t.finalRefunds[i]
			out = append(out, fmt.Sprintf("I4: order %s (%s): refund %s of %d is %s with %d at rest, want succeeded with %d",
				o.ID, b, f.ID, ack.Amount, f.State, f.Amount, ack.Amount))
		}
	}
	if len(t.finalRefunds) > len(t.refunds) {
		out = append(out, fmt.Sprintf("I4: order %s (%s) has %d refunds; the merchant asked for %d (each with its idempotency key)",
			o.ID, b, len(t.finalRefunds), len(t.refunds)))
	}
	if len(t.finalRefunds) > 0 {
		if o.RefundedAmount != notFailed {
			out = append(out, fmt.Sprintf("I4: order %s (%s) says refunded_amount %d; its refunds not failed sum to %d", o.ID, b, o.RefundedAmount, notFailed))
		}
		if paidLike(o.State) && succeeded > 0 && succeeded < o.Amount && o.PayStatus != orderly.PayPartiallyRefunded {
			out = append(out, fmt.Sprintf("I4: order %s (%s) is %s/%s after refunds of %d of %d, want pay_status partially_refunded",
				o.ID, b, o.State, o.PayStatus, succeeded, o.Amount))
		}
	}
	if r.cfg.GatewayLedger != nil {
		for _, f := range t.finalRefunds {
			calls := r.refundCalls()[f.ID]
			var moved []sim.GatewayCall
			for _, c := range calls {
				if !c.Replay {
					moved = append(moved, c)
				}
			}
			switch {
			case f.State == orderly.RefundSucceeded && (len(moved) != 1 || moved[0].Amount != f.Amount || moved[0].PaymentID != f.PaymentID):
				out = append(out, fmt.Sprintf("I3: order %s (%s): refund %s of %d moved money at the gateway %d times (%+v), want once for %d of payment %s",
					o.ID, b, f.ID, f.Amount, len(moved), moved, f.Amount, f.PaymentID))
			case f.State != orderly.RefundSucceeded && len(moved) > 0:
				out = append(out, fmt.Sprintf("I3: order %s (%s): refund %s is %s but the gateway refunded %d for it", o.ID, b, f.ID, f.State, moved[0].Amount))
			}
		}
	}
	return out
}
