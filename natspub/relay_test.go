package natspub_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/natspub"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// TestRelayPublishesEachMessageOnce drives the real outbox relay with the publisher as its
// default handler: every event committed to the outbox arrives in the stream once, with
// its payload and headers, and its row is delivered, also the message that a crashed relay
// had already published before it could mark it delivered (I7, docs/concepts/outbox-and-events.md).
func TestRelayPublishesEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{MsgIDPrefix: "relaytest-"})
	ctx := t.Context()
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	events := []struct {
		topic, key string
		payload    orderly.Sequenced
	}{
		{orderly.TopicOrderClosed, "ord-1", &orderly.OrderEvent{OrderID: "ord-1", State: "closed", Reason: "payment_timeout", At: at}},
		{orderly.TopicOrderPaid, "ord-2", &orderly.OrderEvent{OrderID: "ord-2", State: "paid", At: at}},
		{orderly.TopicPaymentRefunded, "ord-3", &orderly.PaymentRef{PaymentID: "pay-3", OrderID: "ord-3", Amount: 1999}},
		{orderly.TopicOrderClosed, "ord-4", &orderly.OrderEvent{OrderID: "ord-4", State: "closed", Reason: "buyer_cancelled", At: at}},
		{orderly.TopicOrderPaid, "ord-5", &orderly.OrderEvent{OrderID: "ord-5", State: "paid", At: at}},
	}
	err = db.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		var msgs []*store.OutboxInsertParams
		for _, e := range events {
			m, err := outbox.NewEvent(ctx, tx, e.topic, e.key, e.payload, now) // each order's first event: sequence 1
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		return tx.OutboxInsert(ctx, msgs)
	})
	if err != nil {
		t.Fatal(err)
	}
	pending := outboxList(t, db, orderly.MessagePending)
	if len(pending) != len(events) {
		t.Fatalf("%d pending messages, want %d", len(pending), len(events))
	}

	// A previous relay published the second message and crashed before marking it delivered.
	if _, err := b.p.Publish(ctx, pending[1]); err != nil {
		t.Fatal(err)
	}

	h := b.p.Handler()
	relay, err := outbox.NewRelay(outbox.Config{Store: db, Default: &h})
	if err != nil {
		t.Fatal(err)
	}
	n, err := relay.Drain(ctx)
	if err != nil || n != len(events) {
		t.Fatalf("Drain handled %d messages, err %v; want %d, nil", n, err, len(events))
	}
	delivered := outboxList(t, db, orderly.MessageDelivered)
	if len(delivered) != len(events) || len(outboxList(t, db, orderly.MessagePending)) != 0 || len(outboxList(t, db, orderly.MessageDead)) != 0 {
		t.Fatalf("%d delivered messages, want all %d, none pending or dead", len(delivered), len(events))
	}

	got := readAll(t, b.js, b.cfg.Stream, len(events))
	byID := map[string]storedMsg{}
	for _, g := range got {
		if _, dup := byID[g.MsgID]; dup {
			t.Errorf("msg id %s stored twice", g.MsgID)
		}
		byID[g.MsgID] = g
	}
	for i, m := range pending {
		e := events[i]
		payload, err := json.Marshal(e.payload)
		if err != nil {
			t.Fatal(err)
		}
		want := storedMsg{
			Subject: b.cfg.SubjectPrefix + "." + e.topic, MsgID: "relaytest-" + m.MessageID,
			Topic: e.topic, Key: e.key, Sequence: "1", Data: string(payload),
		}
		if g := byID[want.MsgID]; g != want {
			t.Errorf("outbox message %d:\n got %+v\nwant %+v", m.ID, g, want)
		}
	}
}

// outboxList returns the messages in a state, oldest first.
func outboxList(t *testing.T, db store.Store, state string) []*orderly.Message {
	t.Helper()
	var msgs []*orderly.Message
	err := db.Read(t.Context(), func(tx store.Tx) (err error) {
		msgs, err = tx.OutboxList(t.Context(), state, 1000)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// TestTwoDatabasesOneStream: two fresh databases, whose outbox ids are the same (1, 2, 3),
// publish to one stream within its duplicate window: every event of both arrives, because
// the Nats-Msg-Id is the message's UUID, not its row id.
func TestTwoDatabasesOneStream(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{})
	ctx := t.Context()
	h := b.p.Handler()
	for db := range 2 {
		s, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlitetest.Path(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		err = s.InTx(ctx, func(tx store.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			var msgs []*store.OutboxInsertParams
			for i := range 3 {
				id := fmt.Sprintf("db%d-ord-%d", db, i)
				m, err := outbox.NewEvent(ctx, tx, orderly.TopicOrderClosed, id, &orderly.OrderEvent{OrderID: id, State: "closed", At: now}, now)
				if err != nil {
					return err
				}
				msgs = append(msgs, m)
			}
			return tx.OutboxInsert(ctx, msgs)
		})
		if err != nil {
			t.Fatal(err)
		}
		relay, err := outbox.NewRelay(outbox.Config{Store: s, Default: &h})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := relay.Drain(ctx); err != nil || n != 3 {
			t.Fatalf("database %d: Drain handled %d, %v; want 3", db, n, err)
		}
		if d := outboxList(t, s, orderly.MessageDelivered); len(d) != 3 || d[0].ID != 1 {
			t.Fatalf("database %d: delivered %+v; want ids 1, 2, 3", db, d)
		}
	}
	var keys []string
	for _, m := range readAll(t, b.js, b.cfg.Stream, 6) {
		keys = append(keys, m.Key)
	}
	if want := "[db0-ord-0 db0-ord-1 db0-ord-2 db1-ord-0 db1-ord-1 db1-ord-2]"; fmt.Sprint(keys) != want {
		t.Fatalf("stream holds events of %v, want %s", keys, want)
	}
}
