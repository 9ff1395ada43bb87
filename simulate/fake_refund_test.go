package simulate

import (
	"net/http"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
)

// createRefund is the fake's POST /v1/orders/{id}/refunds: the refund succeeds at once
// (the fake has no gateway), within the captured amount, restocking as asked; the same
// Idempotency-Key returns the first refund.
func (f *fakeServer) createRefund(w http.ResponseWriter, r *http.Request, now time.Time) {
	o := f.orders[r.PathValue("id")]
	if o == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
		return
	}
	key := o.ID + "\x00" + r.Header.Get("Idempotency-Key")
	if prev, ok := f.refundKeys[key]; ok && r.Header.Get("Idempotency-Key") != "" {
		writeJSON(w, http.StatusOK, prev)
		return
	}
	var req refundRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	switch {
	case !paidLike(o.State):
		writeProblem(w, http.StatusConflict, orderly.EILLEGAL, "order is "+string(o.State))
		return
	case req.Amount <= 0:
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "amount must be positive")
		return
	case o.RefundedAmount+req.Amount > o.Amount:
		writeProblem(w, http.StatusConflict, orderly.EREFUNDEXCEEDS, "refund exceeds the captured amount")
		return
	}
	o.RefundedAmount += req.Amount
	if !f.opts.confirmRefundsOnRead {
		f.confirmed(o)
	}
	if req.Restock {
		for _, it := range req.Items {
			s := f.stock[it.SKU]
			s.Sold -= it.Quantity
			s.Available += it.Quantity
		}
	}
	paymentID := ""
	for _, p := range f.byOrder[o.ID] {
		if p.State == orderly.PaymentSucceeded {
			paymentID = p.ID
		}
	}
	items := req.Items
	if items == nil {
		items = []orderly.RefundItem{}
	}
	ref := &orderly.Refund{ID: f.id("ref"), OrderID: o.ID, PaymentID: paymentID, Amount: req.Amount, Currency: o.Currency,
		Items: items, Restock: req.Restock, Reason: req.Reason, State: orderly.RefundSucceeded, CreatedAt: now, CompletedAt: &now}
	if f.opts.confirmRefundsOnRead {
		ref.State, ref.CompletedAt = orderly.RefundRequested, nil
	}
	f.refunds[o.ID] = append(f.refunds[o.ID], ref)
	if f.opts.refundTwice {
		again := *ref
		again.ID = f.id("ref")
		f.refunds[o.ID] = append(f.refunds[o.ID], &again)
	}
	f.refundKeys[key] = ref
	writeJSON(w, http.StatusCreated, ref)
}

// confirmed moves order o as a confirmed refund does: pay_status partially_refunded, or
// refunded (state refunded) once its refunds reach the amount; with keepPayStatus nothing
// moves.
func (f *fakeServer) confirmed(o *orderly.Order) {
	if f.opts.keepPayStatus {
		return
	}
	o.PayStatus = orderly.PayPartiallyRefunded
	if o.RefundedAmount == o.Amount {
		o.State, o.PayStatus = orderly.StateRefunded, orderly.PayRefunded
	}
	o.Version++
}

// listRefunds is the fake's GET /v1/orders/{id}/refunds; with confirmRefundsOnRead it
// first confirms the order's requested refunds.
func (f *fakeServer) listRefunds(w http.ResponseWriter, r *http.Request, now time.Time) {
	o := f.orders[r.PathValue("id")]
	if o == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
		return
	}
	list := f.refunds[o.ID]
	if slices.ContainsFunc(list, func(ref *orderly.Refund) bool { return ref.State == orderly.RefundRequested }) {
		for _, ref := range list {
			if ref.State == orderly.RefundRequested {
				ref.State, ref.CompletedAt = orderly.RefundSucceeded, &now
			}
		}
		f.confirmed(o)
	}
	if list == nil {
		list = []*orderly.Refund{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"refunds": list})
}
