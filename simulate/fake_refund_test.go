package simulate

import (
	"net/http"
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
	o.PayStatus = orderly.PayPartiallyRefunded
	if o.RefundedAmount == o.Amount {
		o.State, o.PayStatus = orderly.StateRefunded, orderly.PayRefunded
	}
	o.Version++
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
	f.refunds[o.ID] = append(f.refunds[o.ID], ref)
	if f.opts.refundTwice {
		again := *ref
		again.ID = f.id("ref")
		f.refunds[o.ID] = append(f.refunds[o.ID], &again)
	}
	f.refundKeys[key] = ref
	writeJSON(w, http.StatusCreated, ref)
}

func (f *fakeServer) listRefunds(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if f.orders[r.PathValue("id")] == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
		return
	}
	list := f.refunds[r.PathValue("id")]
	if list == nil {
		list = []*orderly.Refund{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"refunds": list})
}
