package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testOutbox checks the transactional outbox (I7): insert, leased claims, delivery,
// retries, dead letters, re-drive, counts and retention.
func testOutbox(t *testing.T, open opener) {
	t.Run("Events", func(t *testing.T) {
		ctx, s := setup(t, open)
		equal(t, "last id of an empty outbox", read(t, s, func(tx store.Tx) (int64, error) { return tx.OutboxLastID(ctx) }), int64(0))
		closed1 := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		insertMessage(t, s, orderly.TopicPaymentCancel, "o1", t0) // not an event
		paid2 := insertMessage(t, s, orderly.TopicOrderPaid, "o2", t0.Add(time.Second))
		refunded2 := insertMessage(t, s, orderly.TopicOrderRefunded, "o2", t0.Add(2*time.Second))
		events := func(p store.OutboxEventsParams) []int64 {
			t.Helper()
			if p.Limit == 0 {
				p.Limit = 100
			}
			if p.Before.IsZero() {
				p.Before = t0.Add(time.Hour)
			}
			ms := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) { return tx.OutboxEvents(ctx, &p) })
			ids := make([]int64, len(ms))
			for i, m := range ms {
				ids[i] = m.ID
				if m.Sequence < 1 || m.MessageID == "" || len(m.Payload) == 0 {
					t.Errorf("event %d: sequence %d, message id %q, payload %s", m.ID, m.Sequence, m.MessageID, m.Payload)
				}
			}
			return ids
		}
		equal(t, "every event", events(store.OutboxEventsParams{}), []int64{closed1, paid2, refunded2})
		equal(t, "after the first, 1", events(store.OutboxEventsParams{AfterID: closed1, Limit: 1}), []int64{paid2})
		equal(t, "written by t0+1s", events(store.OutboxEventsParams{Before: t0.Add(time.Second)}), []int64{closed1, paid2})
		equal(t, "order.paid", events(store.OutboxEventsParams{Topic: orderly.TopicOrderPaid}), []int64{paid2})
		equal(t, "order o2", events(store.OutboxEventsParams{Key: "o2"}), []int64{paid2, refunded2})
		equal(t, "after the last", events(store.OutboxEventsParams{AfterID: refunded2}), []int64{})
		equal(t, "last id", read(t, s, func(tx store.Tx) (int64, error) { return tx.OutboxLastID(ctx) }), refunded2)
	})
	t.Run("InsertList", func(t *testing.T) {
		ctx, s := setup(t, open)
		now := time.Date(2030, 1, 2, 3, 4, 5, 678_999_999, time.FixedZone("UTC+1", 3600))
		batch := []*store.OutboxInsertParams{
			{Topic: orderly.TopicPaymentCancel, Key: "o1", Payload: []byte(`{"order_id":"o1"}`), Now: now},
			{Topic: orderly.TopicRefundExecute, Key: "o1", Payload: []byte(`{"refund_id":"r1","order_id":"o1"}`), Now: now},
			{Topic: orderly.TopicOrderClosed, Key: "o1",
				Payload:  []byte(`{"order_id":"o1","state":"closed","reason":"payment_timeout","at":"2030-01-02T02:04:05.678Z","n":[1,2.5,null,"ü"]}`),
				Sequence: 1, Now: now},
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, batch) })
		last := &store.OutboxInsertParams{Topic: orderly.TopicOrderPaid, Key: "o2", Payload: []byte(`{}`), Sequence: 1, Now: now.Add(time.Second)}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{last}) })
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, nil) })

		got := listMessages(t, s, orderly.MessagePending, 10)
		var want []*orderly.Message
		for _, p := range append(batch, last) {
			want = append(want, &orderly.Message{Topic: p.Topic, Key: p.Key, Payload: p.Payload, Sequence: p.Sequence,
				State: orderly.MessagePending, NextAttemptAt: utcMS(p.Now), CreatedAt: utcMS(p.Now)})
		}
		equalMessages(t, "pending messages", got, want)
		seen := map[string]bool{}
		for _, m := range got {
			if seen[m.MessageID] {
				t.Errorf("message id %s given twice", m.MessageID)
			}
			seen[m.MessageID] = true
		}
		for i := 1; i < len(got); i++ {
			if got[i].ID <= got[i-1].ID {
				t.Errorf("message ids not increasing in insert order: %d after %d", got[i].ID, got[i-1].ID)
			}
		}
		equalMessages(t, "pending messages, limit 2", listMessages(t, s, orderly.MessagePending, 2), want[:2])
		equal(t, "delivered messages", len(listMessages(t, s, orderly.MessageDelivered, 10)), 0)
		equal(t, "dead messages", len(listMessages(t, s, orderly.MessageDead, 10)), 0)

		// A large batch in one call (the close path writes thousands per transaction).
		many := make([]*store.OutboxInsertParams, 1234)
		for i := range many {
			many[i] = &store.OutboxInsertParams{Topic: orderly.TopicOrderClosed, Key: fmt.Sprintf("k%04d", i),
				Payload: []byte(`{}`), Sequence: 1, Now: t0}
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, many) })
		all := listMessages(t, s, orderly.MessagePending, 10_000)
		if len(all) != 4+len(many) {
			t.Fatalf("%d pending messages after a batch of %d, want %d", len(all), len(many), 4+len(many))
		}
		for i, m := range all[4:] {
			if m.Key != many[i].Key {
				t.Fatalf("message %d of the batch has key %s, want %s (insert order)", i, m.Key, many[i].Key)
			}
		}
	})

	t.Run("ClaimLeases", func(t *testing.T) {
		_, s := setup(t, open)
		m1 := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		m2 := insertMessage(t, s, orderly.TopicOrderClosed, "o2", t0.Add(time.Second))
		m3 := insertMessage(t, s, orderly.TopicOrderClosed, "o3", t0.Add(2*time.Second))
		lease := t0.Add(time.Minute)

		got := claim(t, s, t0.Add(time.Second), lease, 10)
		equal(t, "first claim", claimed(got), []string{
			fmt.Sprintf("%d attempts=1 next=%s", m1, lease.Format(time.RFC3339Nano)),
			fmt.Sprintf("%d attempts=1 next=%s", m2, lease.Format(time.RFC3339Nano)),
		})
		want1 := getMessage(t, s, m1)
		equalMessages(t, "claimed message as returned", got[:1], []*orderly.Message{want1})
		if want1.State != orderly.MessagePending || !want1.NextAttemptAt.Equal(lease) || want1.Attempts != 1 {
			t.Errorf("claimed message in the store: %+v; want pending, attempts 1, next_attempt_at %v", want1, lease)
		}
		equal(t, "second claim at the same time", len(claim(t, s, t0.Add(time.Second), lease, 10)), 0)
		lease3 := t0.Add(2 * time.Minute)
		equal(t, "claim during the lease", claimed(claim(t, s, lease.Add(-time.Millisecond), lease3, 10)), []string{
			fmt.Sprintf("%d attempts=1 next=%s", m3, lease3.Format(time.RFC3339Nano)),
		})
		lease2 := t0.Add(3 * time.Minute)
		equal(t, "claim when the lease ends", claimed(claim(t, s, lease, lease2, 10)), []string{
			fmt.Sprintf("%d attempts=2 next=%s", m1, lease2.Format(time.RFC3339Nano)),
			fmt.Sprintf("%d attempts=2 next=%s", m2, lease2.Format(time.RFC3339Nano)),
		})
	})

	t.Run("ClaimOldestFirstAndLimit", func(t *testing.T) {
		_, s := setup(t, open)
		late := insertMessage(t, s, orderly.TopicOrderClosed, "late", t0.Add(2*time.Second))
		early := insertMessage(t, s, orderly.TopicOrderClosed, "early", t0)
		middle := insertMessage(t, s, orderly.TopicOrderClosed, "middle", t0.Add(time.Second))
		future := insertMessage(t, s, orderly.TopicOrderClosed, "future", t0.Add(time.Hour))
		lease := t0.Add(24 * time.Hour) // past the future one's time
		equal(t, "claim, limit 1", ids64(claim(t, s, t0.Add(10*time.Second), lease, 1)), []int64{early})
		equal(t, "claim, limit 1 again", ids64(claim(t, s, t0.Add(10*time.Second), lease, 1)), []int64{middle})
		equal(t, "claim the rest", ids64(claim(t, s, t0.Add(10*time.Second), lease, 10)), []int64{late})
		equal(t, "claim the future one", ids64(claim(t, s, t0.Add(time.Hour), t0.Add(2*time.Hour), 10)), []int64{future})
	})

	t.Run("ClaimSkipsDeliveredAndDead", func(t *testing.T) {
		ctx, s := setup(t, open)
		delivered := insertMessage(t, s, orderly.TopicOrderClosed, "d", t0)
		dead := insertMessage(t, s, orderly.TopicOrderClosed, "x", t0)
		pending := insertMessage(t, s, orderly.TopicOrderClosed, "p", t0)
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.OutboxMarkDelivered(ctx, []int64{delivered}, t0); err != nil {
				return err
			}
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: dead, LastError: "boom", Dead: true})
		})
		equal(t, "claim", ids64(claim(t, s, t0.Add(time.Hour), t0.Add(2*time.Hour), 10)), []int64{pending})
	})

	t.Run("MarkDelivered", func(t *testing.T) {
		ctx, s := setup(t, open)
		m1 := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		m2 := insertMessage(t, s, orderly.TopicOrderClosed, "o2", t0)
		m3 := insertMessage(t, s, orderly.TopicOrderClosed, "o3", t0)
		dead := insertMessage(t, s, orderly.TopicOrderClosed, "o4", t0)
		claim(t, s, t0, t0.Add(time.Minute), 10)
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: dead, LastError: "gave up", Dead: true})
		})
		before2, beforeDead := getMessage(t, s, m2), getMessage(t, s, dead)
		at := time.Date(2030, 1, 2, 3, 4, 10, 123_456_789, time.UTC)
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{m1, m3, dead}, at) })
		for _, id := range []int64{m1, m3} {
			m := getMessage(t, s, id)
			if m.State != orderly.MessageDelivered || m.DeliveredAt == nil || !m.DeliveredAt.Equal(utcMS(at)) ||
				m.DeliveredAt.Location() != time.UTC || m.Attempts != 1 {
				t.Errorf("message %d after MarkDelivered: %+v; want delivered at %v, attempts 1", id, m, utcMS(at))
			}
		}
		equalMessages(t, "unmarked message", []*orderly.Message{getMessage(t, s, m2)}, []*orderly.Message{before2})
		equalMessages(t, "dead message", []*orderly.Message{getMessage(t, s, dead)}, []*orderly.Message{beforeDead})

		// Delivered is final: marking again keeps the first delivery time.
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{m1}, at.Add(time.Hour)) })
		if m := getMessage(t, s, m1); !m.DeliveredAt.Equal(utcMS(at)) {
			t.Errorf("delivered_at after a second MarkDelivered = %v, want %v", m.DeliveredAt, utcMS(at))
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, nil, at) })
		equal(t, "claim after delivery", len(claim(t, s, t0.Add(24*time.Hour), t0.Add(25*time.Hour), 10)), 1)
	})

	t.Run("MarkFailed", func(t *testing.T) {
		ctx, s := setup(t, open)
		m1 := insertMessage(t, s, orderly.TopicPaymentRefund, "p1", t0)
		m2 := insertMessage(t, s, orderly.TopicPaymentRefund, "p2", t0)
		claim(t, s, t0, t0.Add(time.Minute), 10)
		retry := t0.Add(10 * time.Second)
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: m1, LastError: "gateway timeout", NextAttemptAt: retry}); err != nil {
				return err
			}
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: m2, LastError: "card declined", Dead: true})
		})
		got1 := getMessage(t, s, m1)
		if got1.State != orderly.MessagePending || got1.Attempts != 1 || !got1.NextAttemptAt.Equal(retry) ||
			got1.LastError != "gateway timeout" || got1.DeliveredAt != nil {
			t.Errorf("retried message: %+v; want pending, attempts 1, next_attempt_at %v, last_error set", got1, retry)
		}
		got2 := getMessage(t, s, m2)
		if got2.State != orderly.MessageDead || got2.Attempts != 1 || got2.LastError != "card declined" || got2.DeliveredAt != nil {
			t.Errorf("dead message: %+v; want dead, attempts 1, last_error set", got2)
		}
		equal(t, "dead letters", ids64(listMessages(t, s, orderly.MessageDead, 10)), []int64{m2})

		equal(t, "claim before the retry time", len(claim(t, s, retry.Add(-time.Millisecond), t0.Add(time.Hour), 10)), 0)
		got := claim(t, s, retry, t0.Add(time.Hour), 10)
		equal(t, "claim at the retry time", claimed(got), []string{
			fmt.Sprintf("%d attempts=2 next=%s", m1, t0.Add(time.Hour).Format(time.RFC3339Nano))})
		if len(got) == 1 && got[0].LastError != "gateway timeout" {
			t.Errorf("claimed message lost its last error: %+v", got[0])
		}

		// A failure reported for a message that is no longer pending changes nothing.
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{m1}, retry) })
		equal(t, "claim of a dead letter", len(claim(t, s, t0.Add(1000*time.Hour), t0.Add(1001*time.Hour), 10)), 0)
		before := getMessage(t, s, m1)
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: m1, LastError: "late", NextAttemptAt: retry})
		})
		equalMessages(t, "delivered message after MarkFailed", []*orderly.Message{getMessage(t, s, m1)}, []*orderly.Message{before})
	})

	t.Run("Redrive", func(t *testing.T) {
		ctx, s := setup(t, open)
		dead := insertMessage(t, s, orderly.TopicPaymentRefund, "p1", t0)
		pending := insertMessage(t, s, orderly.TopicPaymentRefund, "p2", t0)
		delivered := insertMessage(t, s, orderly.TopicPaymentRefund, "p3", t0)
		claim(t, s, t0, t0.Add(time.Minute), 10)
		claim(t, s, t0.Add(time.Minute), t0.Add(100*time.Hour), 10) // attempts=2, pending leased past now
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.OutboxMarkDelivered(ctx, []int64{delivered}, t0); err != nil {
				return err
			}
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: dead, LastError: "card declined", Dead: true})
		})
		before := map[int64]*orderly.Message{pending: getMessage(t, s, pending), delivered: getMessage(t, s, delivered)}
		redrive := func(id int64, now time.Time) bool {
			t.Helper()
			return write(t, s, func(tx store.Tx) (bool, error) { return tx.OutboxRedrive(ctx, id, now) })
		}
		now := t0.Add(time.Hour)
		if !redrive(dead, now) {
			t.Fatalf("OutboxRedrive(dead) = false, want true")
		}
		m := getMessage(t, s, dead)
		if m.State != orderly.MessagePending || m.Attempts != 0 || !m.NextAttemptAt.Equal(now) || m.Topic != orderly.TopicPaymentRefund || m.Key != "p1" {
			t.Errorf("re-driven message: %+v; want pending, attempts 0, next_attempt_at %v", m, now)
		}
		for _, c := range []struct {
			name string
			id   int64
		}{{"re-driven again", dead}, {"pending", pending}, {"delivered", delivered}, {"missing", dead + 1000}} {
			if redrive(c.id, now) {
				t.Errorf("OutboxRedrive(%s) = true, want false", c.name)
			}
		}
		for id, b := range before {
			equalMessages(t, fmt.Sprintf("message %d after OutboxRedrive", id), []*orderly.Message{getMessage(t, s, id)}, []*orderly.Message{b})
		}
		equal(t, "claim before now", len(claim(t, s, now.Add(-time.Millisecond), now.Add(time.Hour), 10)), 0)
		equal(t, "claim at now", claimed(claim(t, s, now, now.Add(time.Hour), 10)), []string{
			fmt.Sprintf("%d attempts=1 next=%s", dead, now.Add(time.Hour).Format(time.RFC3339Nano))})
	})

	t.Run("Counts", func(t *testing.T) {
		ctx, s := setup(t, open)
		counts := func() map[string]int64 {
			t.Helper()
			return read(t, s, func(tx store.Tx) (map[string]int64, error) { return tx.OutboxCounts(ctx) })
		}
		equal(t, "counts of an empty outbox", counts(), map[string]int64{
			orderly.MessagePending: 0, orderly.MessageDelivered: 0, orderly.MessageDead: 0})
		var msgs []int64
		for i := range 6 {
			msgs = append(msgs, insertMessage(t, s, orderly.TopicOrderClosed, fmt.Sprint(i), t0))
		}
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.OutboxMarkDelivered(ctx, msgs[:2], t0); err != nil {
				return err
			}
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: msgs[2], LastError: "boom", Dead: true})
		})
		equal(t, "counts", counts(), map[string]int64{
			orderly.MessagePending: 3, orderly.MessageDelivered: 2, orderly.MessageDead: 1})
	})

	t.Run("DeleteDelivered", func(t *testing.T) {
		ctx, s := setup(t, open)
		var delivered []int64
		for i := range 4 {
			id := insertMessage(t, s, orderly.TopicOrderClosed, fmt.Sprint("d", i), t0.Add(-time.Hour))
			inTx(t, s, func(tx store.Tx) error {
				return tx.OutboxMarkDelivered(ctx, []int64{id}, t0.Add(time.Duration(3-i)*time.Second))
			})
			delivered = append(delivered, id) // delivered[3] was delivered first, at t0
		}
		pending := insertMessage(t, s, orderly.TopicOrderClosed, "p", t0.Add(-time.Hour))
		dead := insertMessage(t, s, orderly.TopicOrderClosed, "x", t0.Add(-time.Hour))
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: dead, LastError: "boom", Dead: true})
		})
		del := func(before time.Time, limit int) int64 {
			t.Helper()
			return write(t, s, func(tx store.Tx) (int64, error) { return tx.OutboxDeleteDelivered(ctx, before, limit) })
		}
		// Delivered at t0 (delivered[3]), t0+1s ([2]), t0+2s ([1]), t0+3s ([0]).
		equal(t, "deleted before t0+2s", del(t0.Add(2*time.Second), 10), int64(2))
		equal(t, "delivered left", ids64(listMessages(t, s, orderly.MessageDelivered, 10)), []int64{delivered[0], delivered[1]})
		equal(t, "deleted again before t0+2s", del(t0.Add(2*time.Second), 10), int64(0))
		equal(t, "deleted with limit 1", del(t0.Add(time.Hour), 1), int64(1))
		equal(t, "delivered left after limit 1 (oldest delivery deleted)", ids64(listMessages(t, s, orderly.MessageDelivered, 10)),
			[]int64{delivered[0]})
		equal(t, "pending kept", ids64(listMessages(t, s, orderly.MessagePending, 10)), []int64{pending})
		equal(t, "dead kept", ids64(listMessages(t, s, orderly.MessageDead, 10)), []int64{dead})
	})

	t.Run("Sequences", func(t *testing.T) {
		ctx, s := setup(t, open)
		reserve := func(keys ...string) []int64 {
			t.Helper()
			return write(t, s, func(tx store.Tx) ([]int64, error) { return tx.OutboxSequences(ctx, keys) })
		}
		equal(t, "first events", reserve("o1", "o2", "o1"), []int64{1, 1, 2})
		equal(t, "next event", reserve("o1"), []int64{3})
		equal(t, "no keys", reserve(), []int64(nil))
		// A rolled-back transaction gives its numbers back: the sequence has no gaps.
		err := txErr(t, s, func(tx store.Tx) error {
			if _, err := tx.OutboxSequences(ctx, []string{"o2"}); err != nil {
				return err
			}
			return errors.New("roll back")
		})
		if err == nil {
			t.Fatal("InTx returned nil for a rolled-back transaction")
		}
		equal(t, "after a rollback", reserve("o2", "o3"), []int64{2, 1})

		// The sequence is stored with the message.
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{
				{Topic: orderly.TopicPaymentCancel, Key: "o1", Payload: []byte(`{}`), Now: t0},
				{Topic: orderly.TopicOrderClosed, Key: "o1", Payload: []byte(`{"sequence":4}`), Sequence: 4, Now: t0},
			})
		})
		got := listMessages(t, s, orderly.MessagePending, 10)
		equal(t, "stored sequences", []int64{got[0].Sequence, got[1].Sequence}, []int64{0, 4})

		// An event about an order without its sequence is refused, whatever its topic, and
		// nothing of the batch is written (consumers would drop it as stale).
		for _, topic := range []string{orderly.TopicOrderClosed, orderly.TopicOrderPaid, orderly.TopicPaymentRefunded,
			orderly.TopicRefundSucceeded, orderly.TopicRefundFailed, orderly.TopicOrderRefunded, "order.group_failed"} {
			err := s.InTx(ctx, func(tx store.Tx) error {
				return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{
					{Topic: orderly.TopicPaymentCancel, Key: "o9", Payload: []byte(`{}`), Now: t0},
					{Topic: topic, Key: "o9", Payload: []byte(`{}`), Now: t0},
				})
			})
			if err == nil || !strings.Contains(err.Error(), "needs its sequence") {
				t.Errorf("insert of %s with sequence 0: %v, want refused", topic, err)
			}
		}
		equal(t, "pending after the refused inserts", len(listMessages(t, s, orderly.MessagePending, 10)), 2)
	})

	// ClaimKeyOrder: a message is not claimed while an earlier message of its key is pending
	// (claimed by a relay, or waiting for a retry); other keys go on; once the earlier one is
	// delivered, the later one is claimed.
	t.Run("ClaimKeyOrder", func(t *testing.T) {
		ctx, s := setup(t, open)
		first := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		second := insertMessage(t, s, orderly.TopicPaymentRefunded, "o1", t0)
		other := insertMessage(t, s, orderly.TopicOrderClosed, "o2", t0)
		lease := t0.Add(time.Minute)
		equal(t, "claim, limit 1", ids64(claim(t, s, t0, lease, 1)), []int64{first})
		equal(t, "claim while the first is leased", ids64(claim(t, s, t0, lease, 10)), []int64{other})

		retry := t0.Add(10 * time.Second)
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: first, LastError: "broker down", NextAttemptAt: retry})
		})
		equal(t, "claim while the first waits for its retry", len(claim(t, s, retry.Add(-time.Millisecond), lease, 10)), 0)
		// At its retry time the first is due again, alone: the second has an earlier message
		// due after it, so it waits until that one is delivered.
		equal(t, "claim at the retry time", ids64(claim(t, s, retry, retry.Add(time.Minute), 10)), []int64{first})
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: first, LastError: "broker down", NextAttemptAt: retry})
		})
		equal(t, "claim after a second failure", ids64(claim(t, s, retry, retry.Add(time.Minute), 10)), []int64{first})
		equal(t, "claim while the first is leased again", len(claim(t, s, retry, retry.Add(time.Minute), 10)), 0)
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{first}, retry) })
		equal(t, "claim after the first is delivered", ids64(claim(t, s, retry, retry.Add(time.Minute), 10)), []int64{second})
	})

	// ClaimKeyRun: due messages of one key written together (an order's releases and its
	// event) are claimed together, in id order; the limit cuts the later ones, never an
	// earlier one.
	t.Run("ClaimKeyRun", func(t *testing.T) {
		_, s := setup(t, open)
		var run []int64
		for range 3 {
			run = append(run, insertMessage(t, s, orderly.TopicPaymentCancel, "o1", t0))
		}
		other := insertMessage(t, s, orderly.TopicOrderClosed, "o2", t0)
		equal(t, "claim, limit 2", ids64(claim(t, s, t0, t0.Add(time.Minute), 2)), run[:2])
		equal(t, "claim while the run's head is leased", ids64(claim(t, s, t0, t0.Add(time.Minute), 10)), []int64{other})
		// The lease ended (a crashed relay): the run's head is claimed again; its last message,
		// due before the head's new time, waits until the head is delivered.
		at := t0.Add(time.Minute)
		equal(t, "claim after the lease", ids64(claim(t, s, at, at.Add(time.Minute), 10)), []int64{run[0], run[1], other})
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(t.Context(), run[:2], at) })
		equal(t, "claim after the head is delivered", ids64(claim(t, s, at, at.Add(time.Minute), 10)), run[2:])
	})

	// DeadDoesNotHoldKey: once a message is dead, the later messages of its key are claimed;
	// re-driven, the dead one is claimed again (after them).
	t.Run("DeadDoesNotHoldKey", func(t *testing.T) {
		ctx, s := setup(t, open)
		dead := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		later := insertMessage(t, s, orderly.TopicPaymentRefunded, "o1", t0)
		equal(t, "claim", ids64(claim(t, s, t0, t0.Add(time.Minute), 1)), []int64{dead})
		inTx(t, s, func(tx store.Tx) error {
			return tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: dead, LastError: "gave up", Dead: true})
		})
		equal(t, "claim after the first is dead", ids64(claim(t, s, t0, t0.Add(time.Minute), 10)), []int64{later})
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{later}, t0) })
		if !write(t, s, func(tx store.Tx) (bool, error) { return tx.OutboxRedrive(ctx, dead, t0) }) {
			t.Fatal("re-drive changed nothing")
		}
		equal(t, "claim after the re-drive", ids64(claim(t, s, t0, t0.Add(time.Minute), 10)), []int64{dead})
	})

	// ClaimLanes: a claim with a topic list takes only those topics, one with an exclusion
	// list never takes those (a relay's lanes: webhook deliveries apart from the rest); the
	// key order still holds across lanes.
	t.Run("ClaimLanes", func(t *testing.T) {
		_, s := setup(t, open)
		release := insertMessage(t, s, orderly.TopicPaymentCancel, "o1", t0)
		hookA := insertMessage(t, s, orderly.TopicWebhookDeliver, "webhook:a:o1", t0)
		refund := insertMessage(t, s, orderly.TopicRefundExecute, "o2", t0)
		hookB := insertMessage(t, s, orderly.TopicWebhookDeliver, "webhook:b:o1", t0)
		hookA2 := insertMessage(t, s, orderly.TopicWebhookDeliver, "webhook:a:o1", t0)
		sameKey := insertMessage(t, s, orderly.TopicWebhookDeliver, "o2", t0) // after refund.execute, of its key
		lane := func(only, except []string) []int64 {
			return ids64(write(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
				return tx.OutboxClaim(t.Context(), &store.OutboxClaimParams{Now: t0, LeaseUntil: t0.Add(time.Minute), Limit: 10,
					Topics: only, ExcludeTopics: except})
			}))
		}
		hooks := []string{orderly.TopicWebhookDeliver}
		equal(t, "webhook lane", lane(hooks, nil), []int64{hookA, hookB, hookA2})
		equal(t, "webhook lane again (all leased)", len(lane(hooks, nil)), 0)
		equal(t, "the other lane", lane(nil, hooks), []int64{release, refund})
		equal(t, "a lane of two topics", len(lane([]string{orderly.TopicRefundExecute, orderly.TopicWebhookDeliver}, nil)), 0)
		equal(t, "unfiltered, everything leased", len(claim(t, s, t0, t0.Add(time.Minute), 10)), 0)
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(t.Context(), []int64{refund}, t0) })
		equal(t, "webhook lane once the earlier message of its key is delivered", lane(hooks, nil), []int64{sameKey})
	})

	t.Run("ClaimGroupLimit", func(t *testing.T) {
		// A re-driven backlog of group "slow" (older, so first in claim order) and one fresh
		// message of group "fast": a claim capped at 2 keys a group takes 2 keys of "slow",
		// in order, and reads on past the rest of "slow" to "fast"; "slow" at its limit in
		// Busy is skipped altogether. A key's later message is never taken without its
		// earlier one.
		ctx, s := setup(t, open)
		hook := func(group, key string, at time.Time) int64 {
			inTx(t, s, func(tx store.Tx) error {
				return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicWebhookDeliver,
					Key: "webhook:" + group + ":" + key, Payload: []byte(`{}`), Now: at, Group: group}})
			})
			return slices.MaxFunc(listMessages(t, s, orderly.MessagePending, 1000), func(a, b *orderly.Message) int {
				return cmp.Compare(a.ID, b.ID)
			}).ID
		}
		var slow []int64
		for i := range 6 {
			slow = append(slow, hook("slow", fmt.Sprintf("o%d", i%3), t0)) // keys o0 o1 o2 o0 o1 o2
		}
		fast := hook("fast", "o9", t0.Add(time.Second))
		other := insertMessage(t, s, orderly.TopicWebhookDeliver, "plain", t0) // no group: never capped
		now := t0.Add(2 * time.Second)
		groupClaim := func(limit, groupLimit int, busy map[string]int) []int64 {
			msgs := write(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
				return tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit,
					Topics: []string{orderly.TopicWebhookDeliver}, GroupLimit: groupLimit, Busy: busy})
			})
			ids := ids64(msgs)
			slices.Sort(ids)
			return ids
		}
		got := read(t, s, func(tx store.Tx) (string, error) {
			m, err := tx.OutboxList(ctx, orderly.MessagePending, 1000)
			if err != nil || len(m) == 0 {
				return "", err
			}
			return m[0].Group, nil
		})
		equal(t, "group of the first message", got, "slow")
		equal(t, "claim, 2 keys a group", groupClaim(4, 2, nil), []int64{slow[0], slow[1], fast, other})
		equal(t, "claim with slow at its limit", len(groupClaim(4, 2, map[string]int{"slow": 2})), 0)
		equal(t, "claim with slow at 1 of 2", groupClaim(4, 2, map[string]int{"slow": 1}), []int64{slow[2], slow[5]})
		// Leases end: the leased messages are due again (their keys' later messages wait for
		// them, due later than these).
		now = now.Add(2 * time.Minute)
		equal(t, "claim after the leases, 3 keys a group", groupClaim(10, 3, nil), []int64{slow[0], slow[1], slow[2], slow[5], fast, other})
	})

	t.Run("Unclaim", func(t *testing.T) {
		ctx, s := setup(t, open)
		m1 := insertMessage(t, s, orderly.TopicOrderClosed, "o1", t0)
		m2 := insertMessage(t, s, orderly.TopicOrderClosed, "o2", t0)
		delivered := insertMessage(t, s, orderly.TopicOrderClosed, "o3", t0)
		claim(t, s, t0, t0.Add(time.Minute), 10)
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxMarkDelivered(ctx, []int64{delivered}, t0) })
		before := getMessage(t, s, delivered)
		at := t0.Add(time.Second)
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxUnclaim(ctx, []int64{m1, delivered}, at, "not attempted") })
		got := getMessage(t, s, m1)
		if got.State != orderly.MessagePending || got.Attempts != 0 || !got.NextAttemptAt.Equal(at) || got.LastError != "not attempted" {
			t.Errorf("unclaimed message: %+v; want pending, attempts 0, next_attempt_at %v, last_error set", got, at)
		}
		equalMessages(t, "delivered message after OutboxUnclaim", []*orderly.Message{getMessage(t, s, delivered)}, []*orderly.Message{before})
		equal(t, "claim", claimed(claim(t, s, at, at.Add(time.Minute), 10)), []string{
			fmt.Sprintf("%d attempts=1 next=%s", m1, at.Add(time.Minute).Format(time.RFC3339Nano))})
		if m := getMessage(t, s, m2); m.Attempts != 1 {
			t.Errorf("message not unclaimed: attempts %d, want 1", m.Attempts)
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxUnclaim(ctx, nil, at, "") })
	})
}

// listMessages lists up to limit messages in a state.
func listMessages(t *testing.T, s store.Store, state string, limit int) []*orderly.Message {
	t.Helper()
	return read(t, s, func(tx store.Tx) ([]*orderly.Message, error) { return tx.OutboxList(t.Context(), state, limit) })
}

// claim claims up to limit messages due at now, leased until leaseUntil, sorted by id.
func claim(t *testing.T, s store.Store, now, leaseUntil time.Time, limit int) []*orderly.Message {
	t.Helper()
	msgs := write(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxClaim(t.Context(), &store.OutboxClaimParams{Now: now, LeaseUntil: leaseUntil, Limit: limit})
	})
	slices.SortFunc(msgs, func(a, b *orderly.Message) int { return cmp.Compare(a.ID, b.ID) })
	return msgs
}

// claimed describes claimed messages: id, attempts, next_attempt_at.
func claimed(msgs []*orderly.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.State != orderly.MessagePending {
			out = append(out, fmt.Sprintf("%d state=%s", m.ID, m.State))
			continue
		}
		out = append(out, fmt.Sprintf("%d attempts=%d next=%s", m.ID, m.Attempts, m.NextAttemptAt.Format(time.RFC3339Nano)))
	}
	return out
}

// ids64 returns the ids of messages.
func ids64(msgs []*orderly.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// equalMessages compares messages: payloads as JSON documents, every other field exactly.
// IDs in want that are zero are taken from got.
func equalMessages(t *testing.T, what string, got, want []*orderly.Message) {
	t.Helper()
	if len(got) != len(want) {
		equal(t, what, got, want)
		return
	}
	var g, w []orderly.Message
	for i := range got {
		gm, wm := *got[i], *want[i]
		if !jsonEqual(gm.Payload, wm.Payload) {
			t.Errorf("%s: message %d payload %s, want %s", what, i, gm.Payload, wm.Payload)
		}
		gm.Payload, wm.Payload = nil, nil
		if wm.ID == 0 {
			wm.ID = gm.ID
		}
		if wm.MessageID == "" {
			if _, err := uuid.Parse(gm.MessageID); err != nil {
				t.Errorf("%s: message %d has message id %q, want a UUID: %v", what, i, gm.MessageID, err)
			}
			wm.MessageID = gm.MessageID
		}
		g, w = append(g, gm), append(w, wm)
	}
	equal(t, what, g, w)
}
