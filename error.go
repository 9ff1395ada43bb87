package orderly

import (
	"errors"
	"fmt"
)

// Error codes are stable strings: they are the last path segment of the problem `type`
// URI returned over HTTP (RFC 9457) and are safe to match on in client code. The HTTP
// status for each lives in one table in package httpapi.
const (
	EINVALID        = "invalid-input"          // the request is malformed or breaks a rule (422)
	ENOTFOUND       = "not-found"              // the named order, payment, SKU or coupon does not exist (404)
	EOUTOFSTOCK     = "out-of-stock"           // not enough available stock to reserve (409)
	ECOUPONUNAVAIL  = "coupon-unavailable"     // the coupon is not the user's, not available, expired or too large (409)
	EIDEMPOTENCY    = "idempotency-key-reused" // same Idempotency-Key, different request (422)
	EILLEGAL        = "illegal-transition"     // the flow has no transition for this state and event (409)
	ENOTPAYABLE     = "order-not-payable"      // the order is not pending payment, or its deadline passed (409)
	ECONFLICT       = "conflict"               // the row changed concurrently; retry (409)
	EUNAUTHORIZED   = "unauthorized"           // missing or invalid credentials or signature (401)
	EAMOUNTMISMATCH = "amount-mismatch"        // a callback's amount or currency differs from the attempt's (422)
	EORDERMISMATCH  = "payment-order-mismatch" // a callback names a payment of another order (422)
	ECHANNELTXN     = "channel-txn-conflict"   // the gateway's transaction id is recorded on another payment (409)
	EUNAVAILABLE    = "unavailable"            // a lock wait, busy database or expired deadline; nothing changed, retry (503)
	// EPAYMENTRACE: another attempt for the order was started at the same moment and became
	// its current attempt; this one was not started (409). Use that attempt (the order's
	// payments), or start again to replace it.
	EPAYMENTRACE = "payment-started-concurrently"
	// EWRONGFLOW: the id names an object of another flow or kind than the route serves (a
	// trip on an order route); the message names the route that serves it (409).
	EWRONGFLOW = "wrong-flow"
	// EIDEMPOTENCYINFLIGHT: a request with the same Idempotency-Key is still running; send
	// it again once that one answered (409, Retry-After).
	EIDEMPOTENCYINFLIGHT = "idempotency-key-in-flight"
	EINTERNAL            = "internal" // anything else; details are logged, never shown (500)
)

// Error codes of refunds (see RefundService), stable like those above.
const (
	EREFUNDEXCEEDS = "refund-exceeds-captured" // a refund's amount is more than the captured amount not yet refunded (409)
	EREFUNDITEMS   = "refund-exceeds-items"    // a refund names more units of a SKU than the order bought and were not yet refunded (409)
)

// Error codes of group-buy (see GroupService), stable like those above.
const (
	EGROUPFULL       = "group-full"        // every seat of the group is taken (409)
	EGROUPNOTFORMING = "group-not-forming" // the group succeeded or failed already (409)
	EGROUPEXPIRED    = "group-expired"     // the group's deadline passed on the database clock (409)
	EALREADYMEMBER   = "already-member"    // the user already holds a seat in the group (409)
)

// Error codes of sagas (package saga), stable like those above.
const (
	ESAGANOTSTUCK = "saga-not-stuck" // a re-drive named a saga that is not stuck (409)
)

// Error is the domain error: a stable Code from the list above and a Message that is safe
// to show to the caller. Adapters translate driver errors into *Error or wrap them as
// internal errors.
type Error struct {
	Code    string
	Message string
}

// Error implements the error interface: the message, then the code in brackets
// ("database file x.db: no such file [invalid-input]"), or the code alone when there is no
// message. Match on the code (ErrorCode, errors.As), never on this text.
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Message + " [" + e.Code + "]"
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, "" for nil and EINTERNAL
// for any other error.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, "" for nil and a
// generic text for any other error (whose details must not leak to users).
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "Internal error."
}

// ErrChannelUnavailable is matched (errors.Is) by the errors of calls to a payment channel
// that were refused without reaching its provider because the channel is known to be down:
// its circuit breaker is open, or half-open with its one trial call already under way
// (channel.Guard, channel/guard.go). Such a call says nothing about the payment, so the
// close path never takes it as the provider's answer: an order whose close waits on that
// channel keeps waiting in inspection, past the inspection hold, until the channel answers
// (closer/closer.go).
var ErrChannelUnavailable = errors.New("payment channel unavailable")

// ChannelUnavailableError is the error of one call refused because its channel is
// unavailable (see ErrChannelUnavailable); Channel names the channel ("stripe").
type ChannelUnavailableError struct {
	Channel string
	Op      string // the call: create, query, cancel, refund
	Cause   error  // the breaker's own error
}

// Error implements the error interface.
func (e *ChannelUnavailableError) Error() string {
	return fmt.Sprintf("%s on payment channel %s: channel unavailable (circuit breaker: %v)", e.Op, e.Channel, e.Cause)
}

// Is reports whether target is ErrChannelUnavailable.
func (e *ChannelUnavailableError) Is(target error) bool { return target == ErrChannelUnavailable }

// Unwrap returns the breaker's error.
func (e *ChannelUnavailableError) Unwrap() error { return e.Cause }

// UnavailableChannel returns the channel named by the first ChannelUnavailableError in err's
// chain, and false when err does not say that a channel is unavailable.
func UnavailableChannel(err error) (string, bool) {
	var e *ChannelUnavailableError
	if errors.As(err, &e) {
		return e.Channel, true
	}
	return "", errors.Is(err, ErrChannelUnavailable)
}
