package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// testChannelEvents checks the record of provider notifications: round trip, one row per
// (channel, event id) whatever the number of inserts (also concurrent ones), the same event
// id on another channel, the list by payment id and the kind's CHECK.
func testChannelEvents(t *testing.T, open opener) {
	ctx, s := t.Context(), open(t)
	insert := func(e *store.ChannelEvent) bool {
		return write(t, s, func(tx store.Tx) (bool, error) { return tx.ChannelEventInsert(ctx, e) })
	}
	e1 := &store.ChannelEvent{Channel: "stripe", EventID: "evt_1", Kind: "payment_succeeded", PaymentID: "p1", ReceivedAt: t0}
	e2 := &store.ChannelEvent{Channel: "stripe", EventID: "evt_2", Kind: "refund_succeeded", PaymentID: "p1", ReceivedAt: t0.Add(time.Second)}
	other := &store.ChannelEvent{Channel: "alipay", EventID: "evt_1", Kind: "payment_failed", PaymentID: "p2", ReceivedAt: t0}
	equal(t, "first insert of stripe evt_1", insert(e1), true)
	equal(t, "second insert of stripe evt_1", insert(&store.ChannelEvent{Channel: "stripe", EventID: "evt_1",
		Kind: "payment_failed", PaymentID: "p9", ReceivedAt: t0.Add(time.Hour)}), false)
	equal(t, "insert of evt_2", insert(e2), true)
	equal(t, "evt_1 on another channel", insert(other), true)
	list := func(paymentID string) []*store.ChannelEvent {
		return read(t, s, func(tx store.Tx) ([]*store.ChannelEvent, error) { return tx.ChannelEventList(ctx, paymentID, 10) })
	}
	equal(t, "events of p1 (the duplicate changed nothing)", list("p1"), []*store.ChannelEvent{e1, e2})
	equal(t, "events of p2", list("p2"), []*store.ChannelEvent{other})
	equal(t, "events of p9 (named only by the duplicate)", len(list("p9")), 0)

	// Concurrent inserts of one pair: exactly one reports inserted.
	for round := range 5 {
		e := &store.ChannelEvent{Channel: "stripe", EventID: "evt_race_" + string(rune('a'+round)), Kind: "payment_succeeded",
			PaymentID: "race", ReceivedAt: t0}
		got := make([]bool, 4)
		errs := race(len(got), func(i int) error {
			return s.InTx(ctx, func(tx store.Tx) error {
				var err error
				got[i], err = tx.ChannelEventInsert(ctx, e)
				return err
			})
		})
		n := 0
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: concurrent insert %d: %v", round, i, err)
			}
			if got[i] {
				n++
			}
		}
		equal(t, "inserts that reported inserted among 4 concurrent ones", n, 1)
	}
	equal(t, "rows of the raced events", len(list("race")), 5)

	err := txErr(t, s, func(tx store.Tx) error {
		_, err := tx.ChannelEventInsert(ctx, &store.ChannelEvent{Channel: "stripe", EventID: "evt_bad", Kind: "bad_mood", ReceivedAt: t0})
		return err
	})
	if err == nil {
		t.Error("a channel event of kind bad_mood was written, want a CHECK violation")
	}
}
