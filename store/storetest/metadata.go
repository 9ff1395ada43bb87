package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testMetadata checks the merchant's metadata: written with an order, payment, refund and
// group and read back by every read of it (a trip's is its order's), read with the lock of
// a transition for the events it writes, and changed under the row's lock.
func testMetadata(t *testing.T, open opener) {
	t.Run("Lifecycle", func(t *testing.T) { testMetadataLifecycle(t, open) })
}

func testMetadataLifecycle(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	full := orderly.Metadata{"cart_id": "c-1", "note": strings.Repeat("é", orderly.MetadataMaxValueLen/2)}
	ord := newOrder(&orderOpts{ID: "meta-order"})
	ord.Metadata = full
	inTx(t, s, func(tx store.Tx) error { return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: ord}) })
	plain := insertOrder(t, s, &orderOpts{ID: "meta-plain"})
	equal(t, "order with metadata", getOrder(t, s, ord.ID), ord)
	equal(t, "order without", getOrder(t, s, plain.ID).Metadata, orderly.Metadata(nil))

	p := newPayment(&paymentOpts{OrderID: ord.ID})
	p.Metadata = orderly.Metadata{"attempt_ref": "a-1"}
	inTx(t, s, func(tx store.Tx) error { return tx.PaymentInsert(ctx, p) })
	equal(t, "payment", getPayment(t, s, p.ID).Metadata, p.Metadata)
	f := newRefund(ord, p, 100)
	f.Metadata = orderly.Metadata{"rma": "R-7"}
	inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}) })
	equal(t, "refund", read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(ctx, f.ID) }).Metadata, f.Metadata)
	g := insertGroup(t, s, 3, t0.Add(time.Hour))
	equal(t, "group without", read(t, s, func(tx store.Tx) (*orderly.Group, error) { return tx.GroupGet(ctx, g.ID) }).Metadata, orderly.Metadata(nil))

	// The transition reads the changed orders' metadata with their locks: only those that
	// changed and have some.
	now := t0.Add(time.Hour)
	tp := &store.OrdersTransitionParams{IDs: []string{ord.ID, plain.ID, "meta-missing"}, From: orderly.StatePendingPayment,
		To: orderly.StateClosed, Event: orderly.EventTimeout, CloseAtBy: &now, Now: now,
		CloseReason: orderly.CloseReasonPaymentTimeout, Actor: "sweep"}
	changed := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, tp) })
	equal(t, "changed", changed, []string{ord.ID, plain.ID})
	equal(t, "metadata of the changed orders", tp.Metadata, map[string]orderly.Metadata{ord.ID: full})

	// MetadataLock and MetadataSet on every kind; nil clears.
	for _, c := range []struct {
		of   orderly.MetadataOf
		id   string
		had  orderly.Metadata
		read func() orderly.Metadata
	}{
		{orderly.MetadataOfOrder, ord.ID, full, func() orderly.Metadata { return getOrder(t, s, ord.ID).Metadata }},
		{orderly.MetadataOfPayment, p.ID, p.Metadata, func() orderly.Metadata { return getPayment(t, s, p.ID).Metadata }},
		{orderly.MetadataOfRefund, f.ID, f.Metadata, func() orderly.Metadata {
			return read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(ctx, f.ID) }).Metadata
		}},
		{orderly.MetadataOfGroup, g.ID, nil, func() orderly.Metadata {
			return read(t, s, func(tx store.Tx) (*orderly.Group, error) { return tx.GroupGet(ctx, g.ID) }).Metadata
		}},
	} {
		got := write(t, s, func(tx store.Tx) (orderly.Metadata, error) { return tx.MetadataLock(ctx, c.of, c.id) })
		equal(t, string(c.of)+" locked", got, c.had)
		next := orderly.Metadata{"k": string(c.of)}
		inTx(t, s, func(tx store.Tx) error { return tx.MetadataSet(ctx, c.of, c.id, next) })
		equal(t, string(c.of)+" after set", c.read(), next)
		inTx(t, s, func(tx store.Tx) error { return tx.MetadataSet(ctx, c.of, c.id, next) }) // unchanged: no error (MySQL counts 0 rows)
		inTx(t, s, func(tx store.Tx) error { return tx.MetadataSet(ctx, c.of, c.id, nil) })
		equal(t, string(c.of)+" after clear", c.read(), orderly.Metadata(nil))
		err := txErr(t, s, func(tx store.Tx) error { _, err := tx.MetadataLock(ctx, c.of, "meta-missing"); return err })
		wantCode(t, string(c.of)+" missing", err, orderly.ENOTFOUND)
	}
}
