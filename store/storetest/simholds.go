package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testSimHolds checks the simulated gateway's holds: round trip, the unique id, ENOTFOUND,
// the one guarded resolution (pending → posted once: a second resolve changes nothing), the
// refund guard (never more than captured), the CHECK that keeps a hold from being
// over-captured, the keys (unique, listed per hold oldest first) and the armed faults
// (taken exactly as many times as armed; re-arming replaces the count).
func testSimHolds(t *testing.T, open opener) {
	ctx, s := t.Context(), open(t)
	get := func(id string) *store.SimHold {
		return read(t, s, func(tx store.Tx) (*store.SimHold, error) { return tx.SimHoldGet(ctx, id) })
	}
	h := &store.SimHold{ID: "hold-1", Amount: 5000, State: orderly.HoldPending, ExpiresAt: t0.Add(2 * time.Hour), CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error { return tx.SimHoldInsert(ctx, h) })
	equal(t, "hold read back", get("hold-1"), h)
	equal(t, "hold read locked", write(t, s, func(tx store.Tx) (*store.SimHold, error) { return tx.SimHoldLock(ctx, "hold-1") }), h)
	err := txErr(t, s, func(tx store.Tx) error { return tx.SimHoldInsert(ctx, h) })
	equal(t, "code of a second hold of one id", orderly.ErrorCode(err), orderly.ECONFLICT)
	err = txErr(t, s, func(tx store.Tx) error { _, err := tx.SimHoldGet(ctx, "no-such-hold"); return err })
	equal(t, "code of an unknown hold", orderly.ErrorCode(err), orderly.ENOTFOUND)

	// Never over-captured: captured + released ≤ amount is a CHECK.
	over := *h
	over.State, over.Captured, over.Released, over.ResolvedAt = orderly.HoldPosted, 5000, 1, &t0
	if err := txErr(t, s, func(tx store.Tx) error { _, err := tx.SimHoldResolve(ctx, &over); return err }); err == nil {
		t.Fatal("a capture of 5000 with 1 released from a hold of 5000 was written")
	}
	equal(t, "hold after the refused resolve", get("hold-1"), h)

	// pending → posted once.
	at := t0.Add(time.Minute)
	posted := *h
	posted.State, posted.Captured, posted.Released, posted.ResolvedAt = orderly.HoldPosted, 3820, 1180, &at
	equal(t, "resolve a pending hold", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimHoldResolve(ctx, &posted) }), true)
	equal(t, "hold after the capture", get("hold-1"), &posted)
	voided := *h
	voided.State, voided.Released, voided.ResolvedAt = orderly.HoldVoided, 5000, &at
	equal(t, "resolve a posted hold", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimHoldResolve(ctx, &voided) }), false)
	equal(t, "hold after the refused void", get("hold-1"), &posted)

	// Refunds: never more than captured.
	equal(t, "refund 3000", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimHoldRefund(ctx, "hold-1", 3000) }), true)
	equal(t, "refund 821 more", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimHoldRefund(ctx, "hold-1", 821) }), false)
	equal(t, "refund the last 820", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimHoldRefund(ctx, "hold-1", 820) }), true)
	equal(t, "refunded", get("hold-1").Refunded, int64(3820))

	// Keys.
	k1 := &store.SimHoldKey{Key: "trip-1:payment/capture/action", HoldID: "hold-1", Op: "capture_hold", Amount: 3820, CreatedAt: at}
	k2 := &store.SimHoldKey{Key: "trip-1:refund/refund/action", HoldID: "hold-1", Op: "refund", Amount: 3820, CreatedAt: at.Add(time.Second)}
	k3 := &store.SimHoldKey{Key: "other", HoldID: "hold-2", Op: "void_hold", Amount: 0, CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error {
		for _, k := range []*store.SimHoldKey{k2, k1, k3} {
			if err := tx.SimHoldKeyInsert(ctx, k); err != nil {
				return err
			}
		}
		return nil
	})
	err = txErr(t, s, func(tx store.Tx) error { return tx.SimHoldKeyInsert(ctx, k1) })
	equal(t, "code of a key used twice", orderly.ErrorCode(err), orderly.ECONFLICT)
	equal(t, "key read back", read(t, s, func(tx store.Tx) (*store.SimHoldKey, error) { return tx.SimHoldKeyGet(ctx, k1.Key) }), k1)
	err = txErr(t, s, func(tx store.Tx) error { _, err := tx.SimHoldKeyGet(ctx, "no-such-key"); return err })
	equal(t, "code of an unknown key", orderly.ErrorCode(err), orderly.ENOTFOUND)
	equal(t, "keys of hold-1", read(t, s, func(tx store.Tx) ([]*store.SimHoldKey, error) { return tx.SimHoldKeys(ctx, "hold-1") }),
		[]*store.SimHoldKey{k1, k2})

	equal(t, "keys listed after k1", read(t, s, func(tx store.Tx) ([]*store.SimHoldKey, error) {
		return tx.SimHoldKeyList(ctx, &store.ListParams{AfterID: "other", Limit: 10})
	}), []*store.SimHoldKey{k1, k2})
	h2 := &store.SimHold{ID: "hold-2", Amount: 1, State: orderly.HoldPending, ExpiresAt: t0, CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error { return tx.SimHoldInsert(ctx, h2) })
	equal(t, "holds listed", read(t, s, func(tx store.Tx) ([]*store.SimHold, error) {
		return tx.SimHoldList(ctx, &store.ListParams{Limit: 10})
	}), []*store.SimHold{get("hold-1"), h2})
	equal(t, "holds listed after hold-1", read(t, s, func(tx store.Tx) ([]*store.SimHold, error) {
		return tx.SimHoldList(ctx, &store.ListParams{AfterID: "hold-1", Limit: 1})
	}), []*store.SimHold{h2})

	// Faults: armed n, taken n times; re-arming replaces; 0 disarms.
	take := func() bool {
		return write(t, s, func(tx store.Tx) (bool, error) { return tx.SimGatewayFaultTake(ctx, "capture_hold") })
	}
	equal(t, "take an unarmed fault", take(), false)
	inTx(t, s, func(tx store.Tx) error { return tx.SimGatewayFaultArm(ctx, "capture_hold", 2) })
	inTx(t, s, func(tx store.Tx) error { return tx.SimGatewayFaultArm(ctx, "void_hold", 5) })
	equal(t, "takes of two armed faults", []bool{take(), take(), take()}, []bool{true, true, false})
	inTx(t, s, func(tx store.Tx) error { return tx.SimGatewayFaultArm(ctx, "capture_hold", 1) })
	inTx(t, s, func(tx store.Tx) error { return tx.SimGatewayFaultArm(ctx, "capture_hold", 0) })
	equal(t, "take a disarmed fault", take(), false)
	equal(t, "take another operation's fault", write(t, s, func(tx store.Tx) (bool, error) { return tx.SimGatewayFaultTake(ctx, "void_hold") }), true)
}
