package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// ChannelHeader names the channel of a new payment attempt when the body names none
// (POST /v1/orders/{id}/payments); without either, the configured router or default
// channel decides.
const ChannelHeader = "Orderly-Channel"

// startPayment handles POST /v1/orders/{id}/payments: optional body {"channel"} or header
// Orderly-Channel; 201 with the new payment attempt.
func (s *Server) startPayment(w http.ResponseWriter, r *http.Request) {
	var params orderly.StartPaymentParams
	if !s.decode(w, r, &params, bodyOptional) {
		return
	}
	params.OrderID = pathParam(r, "id")
	params.TraceID = TraceIDFromContext(r.Context())
	if params.Channel == "" {
		params.Channel = r.Header.Get(ChannelHeader) // an explicit choice, e.g. a gray release's test users
	}
	p, err := s.payments.StartPayment(r.Context(), &params)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/payments/"+url.PathEscape(p.ID))
	s.writeJSON(w, r, http.StatusCreated, newPaymentResponse(p))
}

// listOrderPayments handles GET /v1/orders/{id}/payments: {"payments": [...]}, oldest first.
func (s *Server) listOrderPayments(w http.ResponseWriter, r *http.Request) {
	ps, err := s.payments.OrderPayments(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &paymentsResponse{Payments: make([]*paymentResponse, 0, len(ps))}
	for _, p := range ps {
		resp.Payments = append(resp.Payments, newPaymentResponse(p))
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// getPayment handles GET /v1/payments/{id}.
func (s *Server) getPayment(w http.ResponseWriter, r *http.Request) {
	p, err := s.payments.Payment(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, newPaymentResponse(p))
}

// callbackRequest is the body of POST /v1/payments/callback: orderly.Callback with the
// time as a string, so that a malformed time is reported with its field name.
type callbackRequest struct {
	PaymentID    string `json:"payment_id"`
	OrderID      string `json:"order_id"`
	ChannelTxnID string `json:"channel_txn_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Status       string `json:"status"`
	OccurredAt   string `json:"occurred_at"`
}

// callback validates the request's shape and returns it as an orderly.Callback. The error
// is EINVALID and lists every field that is wrong.
func (req *callbackRequest) callback() (*orderly.Callback, error) {
	var problems []string
	if req.PaymentID == "" {
		problems = append(problems, "payment_id: is required")
	}
	if req.OrderID == "" {
		problems = append(problems, "order_id: is required")
	}
	switch req.Status {
	case orderly.CallbackSucceeded:
		if req.ChannelTxnID == "" {
			problems = append(problems, "channel_txn_id: is required when status is succeeded")
		}
	case orderly.CallbackFailed, orderly.CallbackExpired:
	default:
		problems = append(problems, "status: must be one of succeeded, failed, expired")
	}
	if req.Amount < 0 {
		problems = append(problems, "amount: must not be negative")
	}
	if !orderly.ValidCurrency(req.Currency) {
		problems = append(problems, "currency: must be the ISO 4217 code of a currency of money, such as USD")
	}
	cb := &orderly.Callback{
		PaymentID:    req.PaymentID,
		OrderID:      req.OrderID,
		ChannelTxnID: req.ChannelTxnID,
		Amount:       req.Amount,
		Currency:     req.Currency,
		Status:       req.Status,
	}
	if req.OccurredAt == "" {
		problems = append(problems, "occurred_at: is required")
	} else if t, err := parseTime("occurred_at", req.OccurredAt); err != nil {
		problems = append(problems, orderly.ErrorMessage(err))
	} else {
		cb.OccurredAt = t
	}
	if len(problems) > 0 {
		return nil, invalidf("%s", strings.Join(problems, "; "))
	}
	return cb, nil
}

// paymentCallback handles POST /v1/payments/callback, a payment gateway's notification.
//
// The raw body (at most MaxBodyBytes, else 413) is checked against the Orderly-Signature
// header before anything is parsed (401 when the secret is unset, the header is missing or
// malformed, its timestamp is outside the tolerance, or no signature matches). Then the body
// is decoded strictly (415, 422) and validated (422). Every valid callback, duplicates
// included, is answered 200 {"received": true, "applied": bool, "refund": bool}. Every
// refusal of a correctly signed callback (a malformed body, 404 unknown payment, 422
// payment-order-mismatch or amount-mismatch, 409 channel-txn-conflict) is counted, logged
// and kept: GET /v1/payments/{id}/refusals lists them.
func (s *Server) paymentCallback(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if err := s.verifyCallback(r, body); err != nil {
		s.logger.WarnContext(r.Context(), "payment callback refused",
			"trace_id", TraceIDFromContext(r.Context()), "remote_addr", r.RemoteAddr, "reason", orderly.ErrorMessage(err))
		s.writeError(w, r, err)
		return
	}
	var req callbackRequest
	if !s.decodeBody(w, r, body, &req, bodyRequired, ignoreUnknown) {
		s.refuseCallback(r, body, &req, orderly.RefusalInvalidInput, invalidf("the body is not a well-formed callback"))
		return
	}
	cb, err := req.callback()
	if err != nil {
		reason := orderly.RefusalInvalidInput
		if !slices.Contains(callbackStatuses, req.Status) {
			reason = orderly.RefusalInvalidStatus
		}
		s.refuseCallback(r, body, &req, reason, err)
		s.writeError(w, r, err)
		return
	}
	cb.Body = body
	res, err := s.payments.HandleCallback(r.Context(), cb)
	if err == nil && res == nil {
		err = fmt.Errorf("handle callback for payment %s: no result and no error", cb.PaymentID)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, &callbackResponse{Received: true, Applied: res.Applied, Refund: res.Refund})
}

// callbackStatuses are the statuses a callback may report.
var callbackStatuses = []string{orderly.CallbackSucceeded, orderly.CallbackFailed, orderly.CallbackExpired}

// refuseCallback reports a correctly signed callback refused for its body to the payment
// service, which counts, logs and stores it with what could be read of it.
func (s *Server) refuseCallback(r *http.Request, body []byte, req *callbackRequest, reason string, cause error) {
	s.payments.RefuseCallback(r.Context(), &orderly.Callback{
		PaymentID: req.PaymentID, OrderID: req.OrderID, ChannelTxnID: req.ChannelTxnID, Amount: req.Amount,
		Currency: req.Currency, Status: req.Status, Body: body,
	}, reason, cause)
}

// listCallbackRefusals handles GET /v1/payments/{id}/refusals: {"refusals": [...]}, the
// signed callbacks naming this payment id that were refused, oldest first (at most 1000).
// A payment id we do not know may have refusals too: a callback named it.
func (s *Server) listCallbackRefusals(w http.ResponseWriter, r *http.Request) {
	rs, err := s.payments.CallbackRefusals(r.Context(), pathParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := &refusalsResponse{Refusals: make([]*refusalResponse, 0, len(rs))}
	for _, rf := range rs {
		resp.Refusals = append(resp.Refusals, newRefusalResponse(rf))
	}
	s.writeJSON(w, r, http.StatusOK, resp)
}

// verifyCallback checks body's signature; the error is EUNAUTHORIZED.
func (s *Server) verifyCallback(r *http.Request, body []byte) error {
	if len(s.secret) == 0 {
		return orderly.Errorf(orderly.EUNAUTHORIZED, "payment callbacks are not accepted: no callback secret is configured")
	}
	return payment.Verify(s.secret, r.Header.Get(payment.SignatureHeader), body, s.now(), s.tolerance)
}
