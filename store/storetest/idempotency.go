package storetest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// testIdempotency checks idempotency_keys: a claim on a free id; the row returned to any
// other claim while in flight; an answer kept only by the claim's owner; the kept answer
// returned to a later claim; a lapsed claim taken over only by the same request; an
// expired row taken over by any request; release by the owner only; deletion of expired
// rows only.
func testIdempotency(t *testing.T, open opener) {
	t.Run("Lifecycle", func(t *testing.T) { testIdempotencyLifecycle(t, open) })
}

func testIdempotencyLifecycle(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	id := func(c byte) string { return strings.Repeat(string(c), 64) }
	hashA, hashB := id('a'), id('b')
	claim := func(r store.IdempotentRequest) *store.IdempotentRequest {
		t.Helper()
		return write(t, s, func(tx store.Tx) (*store.IdempotentRequest, error) { return tx.IdempotencyClaim(ctx, &r) })
	}
	req := func(rid, hash, owner string, at time.Time) store.IdempotentRequest {
		return store.IdempotentRequest{ID: rid, RequestHash: hash, Owner: owner, CreatedAt: at,
			LockedUntil: at.Add(10 * time.Second), ExpiresAt: at.Add(time.Hour)}
	}
	complete := func(r store.IdempotentRequest) bool {
		t.Helper()
		return write(t, s, func(tx store.Tx) (bool, error) { return tx.IdempotencyComplete(ctx, &r) })
	}

	k := id('1')
	if got := claim(req(k, hashA, "o1", t0)); got != nil {
		t.Fatalf("first claim = %+v, want the claim (nil)", got)
	}
	for _, hash := range []string{hashA, hashB} {
		got := claim(req(k, hash, "o2", t0.Add(time.Second)))
		if got == nil || got.Owner != "o1" || got.Status != 0 || got.RequestHash != hashA || !got.LockedUntil.Equal(t0.Add(10*time.Second)) {
			t.Errorf("claim (hash %.1s) of a claim in flight = %+v, want o1's row in flight", hash, got)
		}
	}
	answer := req(k, hashA, "o2", t0)
	answer.Status, answer.ContentType, answer.Location, answer.Body = 201, "application/json", "/v1/trips/t1", []byte(`{"id":"t1"}`)
	if complete(answer) {
		t.Error("IdempotencyComplete by another owner = true, want false")
	}
	answer.Owner = "o1"
	if !complete(answer) {
		t.Fatal("IdempotencyComplete by the owner = false, want true")
	}
	if complete(answer) {
		t.Error("second IdempotencyComplete = true, want false: the answer is kept once")
	}
	// Past LockedUntil an answered row is still the answer, for any request.
	got := claim(req(k, hashA, "o3", t0.Add(time.Minute)))
	if got == nil || got.Status != 201 || got.ContentType != "application/json" || got.Location != "/v1/trips/t1" ||
		!bytes.Equal(got.Body, []byte(`{"id":"t1"}`)) || !got.CreatedAt.Equal(t0) || !got.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("claim of an answered key = %+v, want the kept answer", got)
	}
	// Expired: any request takes it over, as new.
	if got := claim(req(k, hashB, "o4", t0.Add(time.Hour))); got != nil {
		t.Errorf("claim of an expired key = %+v, want the claim", got)
	}
	if got := claim(req(k, hashB, "o5", t0.Add(time.Hour+time.Second))); got == nil || got.Owner != "o4" || got.Status != 0 || got.Body != nil {
		t.Errorf("claim after the take-over = %+v, want o4's claim in flight, its old answer gone", got)
	}

	// A lapsed claim: the same request takes it over, another does not.
	l := id('2')
	claim(req(l, hashA, "o1", t0))
	lapsed := t0.Add(10 * time.Second)
	if got := claim(req(l, hashB, "o2", lapsed)); got == nil || got.Owner != "o1" {
		t.Errorf("claim of a lapsed key by another request = %+v, want o1's row", got)
	}
	if got := claim(req(l, hashA, "o3", lapsed)); got != nil {
		t.Errorf("claim of a lapsed key by the same request = %+v, want the claim", got)
	}
	answer = req(l, hashA, "o1", t0)
	answer.Status = 200
	if complete(answer) {
		t.Error("IdempotencyComplete by the owner of a claim taken over = true, want false")
	}

	// Release: only the owner's, only in flight.
	inTx(t, s, func(tx store.Tx) error { return tx.IdempotencyRelease(ctx, l, "o1") })
	if got := claim(req(l, hashB, "o4", lapsed)); got == nil || got.Owner != "o3" {
		t.Errorf("after a release by a stale owner the row = %+v, want o3's claim", got)
	}
	inTx(t, s, func(tx store.Tx) error { return tx.IdempotencyRelease(ctx, l, "o3") })
	if got := claim(req(l, hashB, "o5", lapsed)); got != nil {
		t.Errorf("claim after the owner's release = %+v, want the claim", got)
	}

	// Deletion: expired rows only, at most limit.
	m := id('3')
	claim(req(m, hashA, "o1", t0.Add(2*time.Hour))) // expires at t0+3h
	n := write(t, s, func(tx store.Tx) (int64, error) { return tx.IdempotencyDeleteExpired(ctx, t0.Add(2*time.Hour), 1) })
	if n != 1 {
		t.Errorf("IdempotencyDeleteExpired(t0+2h, 1) = %d, want 1", n)
	}
	n = write(t, s, func(tx store.Tx) (int64, error) { return tx.IdempotencyDeleteExpired(ctx, t0.Add(2*time.Hour), 10) })
	if n != 1 {
		t.Errorf("second IdempotencyDeleteExpired(t0+2h) = %d, want 1 (k and l expired at t0+2h and before, m not)", n)
	}
	if got := claim(req(m, hashB, "o2", t0.Add(2*time.Hour))); got == nil || got.Owner != "o1" {
		t.Errorf("row not expired after the deletions = %+v, want o1's claim", got)
	}
}
