package httpapi

import "github.com/orderlyhq/orderly"

// The response bodies below mirror the JSON of the root package's types field for field
// (a test keeps them in step), with Time in place of time.Time so that every time has
// exactly millisecond precision.

// orderResponse is the JSON of an orderly.Order.
type orderResponse struct {
	ID               string              `json:"id"`
	UserID           string              `json:"user_id"`
	Flow             string              `json:"flow"`
	State            orderly.State       `json:"state"`
	PayStatus        orderly.PayStatus   `json:"pay_status"`
	Items            []orderly.Item      `json:"items"`
	Amount           int64               `json:"amount"`
	Currency         string              `json:"currency"`
	CouponID         string              `json:"coupon_id,omitempty"`
	CurrentPaymentID string              `json:"current_payment_id,omitempty"`
	CreatedAt        Time                `json:"created_at"`
	ExpiresAt        Time                `json:"expires_at"`
	CloseAt          Time                `json:"close_at"`
	ClosedAt         *Time               `json:"closed_at,omitempty"`
	CloseReason      orderly.CloseReason `json:"close_reason,omitempty"`
	PaidAt           *Time               `json:"paid_at,omitempty"`
	RefundedAmount   int64               `json:"refunded_amount"`
	Version          int64               `json:"version"`
	Metadata         orderly.Metadata    `json:"metadata"`
}

func newOrderResponse(o *orderly.Order) *orderResponse {
	items := o.Items
	if items == nil {
		items = []orderly.Item{}
	}
	return &orderResponse{
		ID:               o.ID,
		UserID:           o.UserID,
		Flow:             o.Flow,
		State:            o.State,
		PayStatus:        o.PayStatus,
		Items:            items,
		Amount:           o.Amount,
		Currency:         o.Currency,
		CouponID:         o.CouponID,
		CurrentPaymentID: o.CurrentPaymentID,
		CreatedAt:        Time(o.CreatedAt),
		ExpiresAt:        Time(o.ExpiresAt),
		CloseAt:          Time(o.CloseAt),
		ClosedAt:         timePtr(o.ClosedAt),
		CloseReason:      o.CloseReason,
		PaidAt:           timePtr(o.PaidAt),
		RefundedAmount:   o.RefundedAmount,
		Version:          o.Version,
		Metadata:         metadataOut(o.Metadata),
	}
}

// transitionResponse is the JSON of an orderly.Transition.
type transitionResponse struct {
	ID            int64             `json:"id"`
	OrderID       string            `json:"order_id"`
	From          orderly.State     `json:"from"`
	To            orderly.State     `json:"to"`
	Event         orderly.Event     `json:"event"`
	PayStatusFrom orderly.PayStatus `json:"pay_status_from,omitempty"`
	PayStatusTo   orderly.PayStatus `json:"pay_status_to,omitempty"`
	Cause         string            `json:"cause,omitempty"`
	Actor         string            `json:"actor"`
	At            Time              `json:"at"`
	TraceID       string            `json:"trace_id,omitempty"`
}

func newTransitionResponse(t *orderly.Transition) *transitionResponse {
	return &transitionResponse{
		ID:            t.ID,
		OrderID:       t.OrderID,
		From:          t.From,
		To:            t.To,
		Event:         t.Event,
		PayStatusFrom: t.PayStatusFrom,
		PayStatusTo:   t.PayStatusTo,
		Cause:         t.Cause,
		Actor:         t.Actor,
		At:            Time(t.At),
		TraceID:       t.TraceID,
	}
}

// historyResponse is the body of GET /v1/orders/{id}/history.
type historyResponse struct {
	Transitions []*transitionResponse `json:"transitions"`
}

// paymentResponse is the JSON of an orderly.Payment.
type paymentResponse struct {
	ID           string               `json:"payment_id"`
	OrderID      string               `json:"order_id"`
	Attempt      int64                `json:"attempt"`
	Channel      string               `json:"channel"`
	Variant      string               `json:"variant"` // "" when the channel has one version
	ChannelTxnID string               `json:"channel_txn_id,omitempty"`
	Amount       int64                `json:"amount"`
	Currency     string               `json:"currency"`
	State        orderly.PaymentState `json:"state"`
	FailReason   string               `json:"fail_reason,omitempty"`
	CreatedAt    Time                 `json:"created_at"`
	SucceededAt  *Time                `json:"succeeded_at,omitempty"`
	RefundedAt   *Time                `json:"refunded_at,omitempty"`
	DuplicateOf  string               `json:"duplicate_of,omitempty"`
	ProviderRef  string               `json:"provider_ref,omitempty"`
	PayerID      string               `json:"payer_id,omitempty"`
	NextAction   *orderly.NextAction  `json:"next_action,omitempty"`
	Metadata     orderly.Metadata     `json:"metadata"`
}

func newPaymentResponse(p *orderly.Payment) *paymentResponse {
	return &paymentResponse{
		ID:           p.ID,
		OrderID:      p.OrderID,
		Attempt:      p.Attempt,
		Channel:      p.Channel,
		Variant:      p.Variant,
		ChannelTxnID: p.ChannelTxnID,
		Amount:       p.Amount,
		Currency:     p.Currency,
		State:        p.State,
		FailReason:   p.FailReason,
		CreatedAt:    Time(p.CreatedAt),
		SucceededAt:  timePtr(p.SucceededAt),
		RefundedAt:   timePtr(p.RefundedAt),
		DuplicateOf:  p.DuplicateOf,
		ProviderRef:  p.ProviderRef,
		PayerID:      p.PayerID,
		NextAction:   p.NextAction,
		Metadata:     metadataOut(p.Metadata),
	}
}

// paymentsResponse is the body of GET /v1/orders/{id}/payments.
type paymentsResponse struct {
	Payments []*paymentResponse `json:"payments"`
}

// refusalResponse is the JSON of an orderly.CallbackRefusal.
type refusalResponse struct {
	ID           int64  `json:"id"`
	PaymentID    string `json:"payment_id"`
	OrderID      string `json:"order_id"`
	Reason       string `json:"reason"`
	Detail       string `json:"detail"`
	Status       string `json:"status"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	ChannelTxnID string `json:"channel_txn_id,omitempty"`
	Body         string `json:"body"`
	CreatedAt    Time   `json:"created_at"`
}

func newRefusalResponse(r *orderly.CallbackRefusal) *refusalResponse {
	return &refusalResponse{
		ID:           r.ID,
		PaymentID:    r.PaymentID,
		OrderID:      r.OrderID,
		Reason:       r.Reason,
		Detail:       r.Detail,
		Status:       r.Status,
		Amount:       r.Amount,
		Currency:     r.Currency,
		ChannelTxnID: r.ChannelTxnID,
		Body:         r.Body,
		CreatedAt:    Time(r.CreatedAt),
	}
}

// refusalsResponse is the body of GET /v1/payments/{id}/refusals.
type refusalsResponse struct {
	Refusals []*refusalResponse `json:"refusals"`
}

// callbackResponse is the body of POST /v1/payments/callback: the callback was received
// (always true), whether it changed anything and whether it led to a refund.
type callbackResponse struct {
	Received bool `json:"received"`
	Applied  bool `json:"applied"`
	Refund   bool `json:"refund"`
}

// couponResponse is the JSON of an orderly.Coupon.
type couponResponse struct {
	ID        string `json:"id"`
	UserID    string `json:"user_id"`
	AmountOff int64  `json:"amount_off"`
	Currency  string `json:"currency"`
	State     string `json:"state"`
	OrderID   string `json:"order_id,omitempty"`
	ExpiresAt *Time  `json:"expires_at,omitempty"`
	CreatedAt Time   `json:"created_at"`
}

func newCouponResponse(c *orderly.Coupon) *couponResponse {
	return &couponResponse{
		ID:        c.ID,
		UserID:    c.UserID,
		AmountOff: c.AmountOff,
		Currency:  c.Currency,
		State:     c.State,
		OrderID:   c.OrderID,
		ExpiresAt: timePtr(c.ExpiresAt),
		CreatedAt: Time(c.CreatedAt),
	}
}

// statusResponse is the body of /healthz and /readyz: status "ok", or "degraded" with the
// optional dependencies that are down (readyz only).
type statusResponse struct {
	Status   string   `json:"status"`
	Degraded []string `json:"degraded,omitempty"`
}
