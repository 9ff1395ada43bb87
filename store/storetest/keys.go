package storetest

import (
	"bytes"
	"crypto/sha256"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testKeys checks API keys: round trip (name, scopes in order, the 32-byte digest, times),
// list by id, ECONFLICT on a taken id, the count (revoked keys included), revoke once
// (a second revoke and a revoke of a missing key change nothing), last_used_at only moving
// forward, ENOTFOUND.
func testKeys(t *testing.T, open opener) {
	t.Run("Lifecycle", func(t *testing.T) { testKeyLifecycle(t, open) })
}

func testKeyLifecycle(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	if n := read(t, s, func(tx store.Tx) (int64, error) { return tx.KeyCount(ctx) }); n != 0 {
		t.Fatalf("KeyCount of an empty store = %d, want 0", n)
	}
	sumB, sumA := sha256.Sum256([]byte("secret-b")), sha256.Sum256([]byte("secret-a"))
	b := &store.APIKey{ID: "k2", Name: "shop backend", Scopes: []string{"buyer", "merchant"}, Hash: sumB[:], CreatedAt: t0}
	a := &store.APIKey{ID: "k1", Name: "ops", Scopes: []string{"admin"}, Hash: sumA[:], CreatedAt: t0.Add(time.Second)}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.KeyInsert(ctx, b); err != nil {
			return err
		}
		return tx.KeyInsert(ctx, a)
	})
	got := read(t, s, func(tx store.Tx) (*store.APIKey, error) { return tx.KeyGet(ctx, "k2") })
	if got.Name != "shop backend" || !slices.Equal(got.Scopes, []string{"buyer", "merchant"}) || !bytes.Equal(got.Hash, sumB[:]) ||
		!got.CreatedAt.Equal(t0) || got.LastUsedAt != nil || got.RevokedAt != nil {
		t.Errorf("KeyGet = %+v, want %+v", got, b)
	}
	list := read(t, s, func(tx store.Tx) ([]*store.APIKey, error) { return tx.KeyList(ctx) })
	if len(list) != 2 || list[0].ID != "k1" || list[1].ID != "k2" || !bytes.Equal(list[0].Hash, sumA[:]) {
		t.Errorf("KeyList = %+v, want k1 then k2 with their digests", list)
	}
	err := s.InTx(ctx, func(tx store.Tx) error { return tx.KeyInsert(ctx, a) })
	if orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Errorf("insert of a taken id = %v, want ECONFLICT", err)
	}

	at := t0.Add(time.Minute)
	revoked := write(t, s, func(tx store.Tx) (bool, error) { return tx.KeyRevoke(ctx, "k2", at) })
	again := write(t, s, func(tx store.Tx) (bool, error) { return tx.KeyRevoke(ctx, "k2", at.Add(time.Hour)) })
	missing := write(t, s, func(tx store.Tx) (bool, error) { return tx.KeyRevoke(ctx, "nope", at) })
	if !revoked || again || missing {
		t.Errorf("KeyRevoke = %v, again %v, missing %v; want true, false, false", revoked, again, missing)
	}
	got = read(t, s, func(tx store.Tx) (*store.APIKey, error) { return tx.KeyGet(ctx, "k2") })
	if got.RevokedAt == nil || !got.RevokedAt.Equal(at) {
		t.Errorf("revoked_at = %v, want %v (the first revoke's time)", got.RevokedAt, at)
	}
	if n := read(t, s, func(tx store.Tx) (int64, error) { return tx.KeyCount(ctx) }); n != 2 {
		t.Errorf("KeyCount = %d, want 2 (a revoked key still counts)", n)
	}

	later := t0.Add(2 * time.Minute)
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.KeyTouch(ctx, "k1", later); err != nil {
			return err
		}
		return tx.KeyTouch(ctx, "k1", t0.Add(time.Minute)) // older: ignored
	})
	got = read(t, s, func(tx store.Tx) (*store.APIKey, error) { return tx.KeyGet(ctx, "k1") })
	if got.LastUsedAt == nil || !got.LastUsedAt.Equal(later) {
		t.Errorf("last_used_at = %v, want %v (never moved back)", got.LastUsedAt, later)
	}
	err = s.Read(ctx, func(tx store.Tx) error { _, err := tx.KeyGet(ctx, "nope"); return err })
	if orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("KeyGet of a missing key = %v, want ENOTFOUND", err)
	}
}
