package orderly

import (
	"context"
	"fmt"
	"time"
)

// Hold is a card hold (pre-authorisation) at a payment gateway, in minor units: Amount
// authorised until ExpiresAt (the gateway's clock), then Captured (≤ Amount, once) and the
// rest Released, or voided or expired (Released = Amount); Refunded (≤ Captured) of the
// capture was given back.
type Hold struct {
	ID        string    `json:"id"`
	Amount    int64     `json:"amount"`
	Captured  int64     `json:"captured"`
	Released  int64     `json:"released"`
	Refunded  int64     `json:"refunded"`
	State     HoldState `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
}

// HoldGateway is the port of a gateway with card holds (channel/sim implements it): partial
// capture, void and expiry, and refunds of what a hold captured, each idempotent per key.
// A call whose reply was lost answers ErrGatewayTimeout: retry it with the same key.
type HoldGateway interface {
	// Authorize places a hold of amount minor units until ttl from now; the hold id is its
	// idempotency key (the same id for another amount is EIDEMPOTENCY).
	Authorize(ctx context.Context, holdID string, amount int64, ttl time.Duration) (*Hold, error)
	// CaptureHold captures amount (≤ the hold) once per key and releases the rest.
	// Errors: EHOLDEXPIRED, EHOLDNOTPENDING, EHOLDEXCEEDED, EIDEMPOTENCY, ENOTFOUND.
	CaptureHold(ctx context.Context, holdID, key string, amount int64) (*Hold, error)
	// VoidHold releases a pending hold in full once per key.
	VoidHold(ctx context.Context, holdID, key string) (*Hold, error)
	// Hold returns the hold as the gateway sees it now (expired once past ExpiresAt);
	// ENOTFOUND if there is none.
	Hold(ctx context.Context, holdID string) (*Hold, error)
	// RefundHold gives back amount of what the hold captured, once per key.
	// Errors: EINVALID, ENOTFOUND, EREFUNDEXCEEDS, ECONFLICT (a key reused otherwise).
	RefundHold(ctx context.Context, holdID, key string, amount int64) error
}

// ErrGatewayTimeout is the error of a gateway call whose reply did not arrive in time: the
// caller cannot tell whether the gateway applied it, and must retry with the same
// idempotency key (or inspect). It wraps context.DeadlineExceeded.
var ErrGatewayTimeout = fmt.Errorf("the gateway did not answer in time; the call may have been applied: %w", context.DeadlineExceeded)
