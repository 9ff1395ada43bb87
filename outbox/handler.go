package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Handler delivers the messages of one topic. Either part may be nil.
type Handler struct {
	// Call runs outside any transaction, before Apply: external effects such as a gateway
	// refund or a publish to a broker. It runs at least once per message (again after a
	// crash or a failed Apply), so it must be idempotent per message, e.g. by passing the
	// message or payment id to the other side as an idempotency key.
	Call func(ctx context.Context, m *orderly.Message) error
	// Apply runs inside the transaction that marks the messages delivered, so their local
	// effects happen exactly once (I7). It gets every message of its topic in the batch, so
	// that it can apply them with a few set-based statements. When it fails, its changes
	// are rolled back and it is called again once per message, so that only the failing
	// messages are retried.
	Apply func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// pendingError marks a call whose outcome the other side has not made final yet.
type pendingError struct{ err error }

func (e *pendingError) Error() string { return e.err.Error() }
func (e *pendingError) Unwrap() error { return e.err }

// Pending wraps err to say that the other side accepted the call but its outcome is not
// final yet (a refund a provider reports pending): the relay asks again with the usual
// backoff, and the message goes dead only once Config.PendingFor has passed since it was
// written, not after MaxAttempts. It is logged at info, not as a failure.
func Pending(err error) error { return &pendingError{err: err} }

// IsPending reports whether err was wrapped with Pending.
func IsPending(err error) bool {
	var p *pendingError
	return errors.As(err, &p)
}

// Permanent wraps err so that the relay moves the message to dead at once instead of
// retrying (a malformed payload, say).
func Permanent(err error) error { return &permanentError{err: err} }

// IsPermanent reports whether err was wrapped with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Decode unmarshals a message's payload into v; a malformed payload is a permanent error.
func Decode(m *orderly.Message, v any) error {
	if err := json.Unmarshal(m.Payload, v); err != nil {
		return Permanent(fmt.Errorf("message %d (%s): malformed payload: %w", m.ID, m.Topic, err))
	}
	return nil
}
