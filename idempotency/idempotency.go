// Package idempotency keeps the answers of requests sent with an Idempotency-Key, so that a
// client may send any POST again after a lost answer and have it take effect once
// (docs/concepts/idempotency.md).
//
// A request claims its key before it runs (Begin) and stores its answer after (Claim.Complete):
// the same request sent again gets that answer; another request under the same key is
// refused with EIDEMPOTENCY; a request sent while the first still runs is refused with
// EIDEMPOTENCYINFLIGHT. An answer that left nothing changed (a refusal for bad input, a
// busy database) is not kept (Claim.Release), so the key may be used again. Answers are
// kept for Config.TTL; the Retention job deletes them after.
//
// The claim and the answer are written in transactions of their own, around the request's:
// when the instance dies between the request's commit and the answer's, the claim lapses
// after Config.Lease and the request sent again runs again. Routes whose service keeps its
// key in the request's own transaction (an order's create, a refund, a wallet credit) stay
// exact even then.
package idempotency

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.
const (
	DefaultTTL   = 24 * time.Hour   // how long an answer is kept
	DefaultLease = 30 * time.Second // how long an unanswered claim holds
)

// Config configures a Service.
type Config struct {
	Store store.Store // required
	// TTL is how long an answer is kept, from the claim; DefaultTTL when zero. A key may be
	// used for another request once it passed.
	TTL time.Duration
	// Lease is how long a claim holds while its request runs; DefaultLease when zero. It
	// must be longer than any request may run (the HTTP request timeout), or a request sent
	// again could run beside the first.
	Lease time.Duration
}

// Service claims keys and keeps answers.
type Service struct {
	st         store.Store
	ttl, lease time.Duration
}

// New returns a Service. EINVALID for a nil store or a negative duration.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, orderly.Errorf(orderly.EINVALID, "idempotency: Config.Store is nil")
	}
	if cfg.TTL < 0 || cfg.Lease < 0 {
		return nil, orderly.Errorf(orderly.EINVALID, "idempotency: TTL and Lease must not be negative")
	}
	return &Service{st: cfg.Store, ttl: cmp.Or(cfg.TTL, DefaultTTL), lease: cmp.Or(cfg.Lease, DefaultLease)}, nil
}

// Answer is a kept answer: HTTP status, Content-Type, Location ("" for none) and body.
type Answer struct {
	Status      int
	ContentType string
	Location    string
	Body        []byte
}

// Claim is a request's hold on its key, from Begin until Complete or Release.
type Claim struct {
	s         *Service
	id, owner string
}

// Begin claims key, within scope (the route's method and path), for the request whose
// RequestHash is hash. It returns the claim when the request should run, or the kept
// answer of the same request sent before. Errors: EIDEMPOTENCY when the key was used for
// another request; EIDEMPOTENCYINFLIGHT when the same request is still running (retry
// after a second); EUNAVAILABLE and others from the store.
func (s *Service) Begin(ctx context.Context, scope, key, hash string) (*Claim, *Answer, error) {
	sum := sha256.Sum256([]byte(scope + "\x00" + key))
	r := &store.IdempotentRequest{ID: hex.EncodeToString(sum[:]), RequestHash: hash, Owner: token()}
	var got *store.IdempotentRequest
	err := s.st.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		r.CreatedAt, r.LockedUntil, r.ExpiresAt = now, now.Add(s.lease), now.Add(s.ttl)
		got, err = tx.IdempotencyClaim(ctx, r)
		return err
	})
	switch {
	case err != nil:
		return nil, nil, err
	case got == nil:
		return &Claim{s: s, id: r.ID, owner: r.Owner}, nil, nil
	case got.RequestHash != hash:
		return nil, nil, orderly.Errorf(orderly.EIDEMPOTENCY,
			"Idempotency-Key %q was used for a different request to %s; use a new key for a new request", key, scope)
	case got.Status == 0:
		return nil, nil, orderly.Errorf(orderly.EIDEMPOTENCYINFLIGHT,
			"a request with Idempotency-Key %q is still running; retry it once it answered", key)
	}
	return nil, &Answer{Status: got.Status, ContentType: got.ContentType, Location: got.Location, Body: got.Body}, nil
}

// Complete keeps a as the answer of the claim's request. It reports EIDEMPOTENCYINFLIGHT
// when the claim lapsed (the request ran past Config.Lease) and another took it over.
func (c *Claim) Complete(ctx context.Context, a *Answer) error {
	r := &store.IdempotentRequest{ID: c.id, Owner: c.owner, Status: a.Status, ContentType: a.ContentType,
		Location: a.Location, Body: a.Body}
	return c.s.st.InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.IdempotencyComplete(ctx, r)
		if err == nil && !ok {
			err = orderly.Errorf(orderly.EIDEMPOTENCYINFLIGHT, "the claim of idempotency key %s lapsed before its answer", c.id)
		}
		return err
	})
}

// Release forgets the claim: its request's answer is not kept and the key may be used again.
func (c *Claim) Release(ctx context.Context) error {
	return c.s.st.InTx(ctx, func(tx store.Tx) error { return tx.IdempotencyRelease(ctx, c.id, c.owner) })
}

// Retention is the idempotency retention job (a job.Func): it deletes the answers whose
// TTL passed, in batches of 1000, each transaction fenced by the job's lease.
func (s *Service) Retention(ctx context.Context, fence job.Fence) (scanned, deleted int64, err error) {
	const batch = 1000
	for {
		var n int64
		err := job.InFencedTx(ctx, s.st, fence, func(tx store.Tx, now time.Time) (err error) {
			n, err = tx.IdempotencyDeleteExpired(ctx, now, batch)
			return err
		})
		deleted += n
		if err != nil || n < batch {
			return deleted, deleted, err
		}
	}
}

// RequestHash returns the hex SHA-256 of a request: its method, path and query, and its
// body, in canonical form when it is JSON (keys sorted, no insignificant space), so that a
// client that encodes the same request again another way sends the same request.
func RequestHash(method, pathAndQuery string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method + " " + pathAndQuery + "\n"))
	h.Write(canonical(body))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical returns JSON body re-encoded with sorted keys and no insignificant space, and
// any other body as it is.
func canonical(body []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return body
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

// token returns a claim's random owner token: 16 bytes in hex.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
