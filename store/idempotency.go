package store

import (
	"context"
	"time"
)

// IdempotencyTx holds the queries of idempotency_keys, the answers kept for requests sent
// with an Idempotency-Key (package idempotency). It is part of Tx.
type IdempotencyTx interface {
	// IdempotencyClaim claims r.ID for the request r describes (Status 0, in flight): it
	// inserts r when no row has the id, or writes r over the row when the row's answer
	// expired (ExpiresAt at or before r.CreatedAt) or when the row is the same request
	// (RequestHash) whose claim lapsed unanswered (LockedUntil at or before r.CreatedAt: the
	// instance that served it died). It returns nil when r holds the claim, else the row as
	// it is (another request's claim or kept answer). A concurrent claim of the same id
	// waits for the other transaction.
	IdempotencyClaim(ctx context.Context, r *IdempotentRequest) (*IdempotentRequest, error)
	// IdempotencyComplete stores r's answer (Status, ContentType, Location, Body) on the
	// row that r's claim (ID, Owner) still holds and reports whether it did (false: the
	// claim lapsed and was taken over).
	IdempotencyComplete(ctx context.Context, r *IdempotentRequest) (bool, error)
	// IdempotencyRelease deletes the row of the claim (id, owner), if the claim still
	// holds it: the request's answer is not kept, and the key may be used again.
	IdempotencyRelease(ctx context.Context, id, owner string) error
	// IdempotencyDeleteExpired deletes up to limit rows whose ExpiresAt is at or before
	// now and returns how many it deleted.
	IdempotencyDeleteExpired(ctx context.Context, now time.Time, limit int) (int64, error)
}

// IdempotentRequest is one row of idempotency_keys: a request's claim on its key and,
// once answered, its answer. Times are the database's clock, UTC, milliseconds.
type IdempotentRequest struct {
	ID          string    // hex SHA-256 of the key's scope and the key, 64 characters
	RequestHash string    // hex SHA-256 of the request (method, path, canonical body)
	Owner       string    // the claim's random token
	Status      int       // the answer's HTTP status; 0 while the request is in flight
	ContentType string    // the answer's Content-Type
	Location    string    // the answer's Location, "" when it had none
	Body        []byte    // the answer's body
	CreatedAt   time.Time // when the claim was made
	LockedUntil time.Time // when an unanswered claim lapses
	ExpiresAt   time.Time // when the row may be deleted and the key used again
}
