package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testWebhooks checks subscribers (round trip with topics and secret, list by id, delete,
// ENOTFOUND, ECONFLICT on a taken id, the CHECK on the URL scheme), the trace context of
// orders (first write kept) and of outbox messages, and the outbox backlog.
func testWebhooks(t *testing.T, open opener) {
	t.Run("Subscribers", func(t *testing.T) { testSubscribers(t, open) })
	t.Run("Traces", func(t *testing.T) { testTraces(t, open) })
	t.Run("OutboxBacklog", func(t *testing.T) { testOutboxBacklog(t, open) })
}

func testSubscribers(t *testing.T, open opener) {
	t.Parallel()
	s := open(t)
	a := &orderly.Webhook{ID: "whk_b", URL: "https://example.com/b", Topics: []string{"order.closed", "order.paid"}, Secret: "secret-b-0123456789", CreatedAt: t0}
	b := &orderly.Webhook{ID: "whk_a", URL: "http://127.0.0.1:9/a", Topics: []string{"*"}, Secret: "secret-a-0123456789", CreatedAt: t0.Add(time.Second)}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.WebhookInsert(t.Context(), a); err != nil {
			return err
		}
		return tx.WebhookInsert(t.Context(), b)
	})
	got := read(t, s, func(tx store.Tx) (*orderly.Webhook, error) { return tx.WebhookGet(t.Context(), "whk_b") })
	if got.URL != a.URL || !slices.Equal(got.Topics, a.Topics) || got.Secret != a.Secret || !got.CreatedAt.Equal(t0) {
		t.Errorf("WebhookGet = %+v, want %+v", got, a)
	}
	list := read(t, s, func(tx store.Tx) ([]*orderly.Webhook, error) { return tx.WebhookList(t.Context()) })
	if len(list) != 2 || list[0].ID != "whk_a" || list[1].ID != "whk_b" || list[0].Secret != b.Secret {
		t.Errorf("WebhookList = %+v, want whk_a then whk_b with secrets", list)
	}
	err := s.InTx(t.Context(), func(tx store.Tx) error { return tx.WebhookInsert(t.Context(), a) })
	if orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Errorf("insert of a taken id = %v, want ECONFLICT", err)
	}
	err = s.InTx(t.Context(), func(tx store.Tx) error {
		return tx.WebhookInsert(t.Context(), &orderly.Webhook{ID: "whk_c", URL: "ftp://example.com", Topics: []string{"*"}, Secret: "x", CreatedAt: t0})
	})
	if err == nil {
		t.Error("an ftp:// URL passed the CHECK constraint")
	}
	deleted := write(t, s, func(tx store.Tx) (bool, error) { return tx.WebhookDelete(t.Context(), "whk_b") })
	again := write(t, s, func(tx store.Tx) (bool, error) { return tx.WebhookDelete(t.Context(), "whk_b") })
	if !deleted || again {
		t.Errorf("WebhookDelete = %v then %v, want true then false", deleted, again)
	}
	err = s.Read(t.Context(), func(tx store.Tx) error { _, err := tx.WebhookGet(t.Context(), "whk_b"); return err })
	if orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("WebhookGet of a deleted subscriber = %v, want ENOTFOUND", err)
	}
}

func testTraces(t *testing.T, open opener) {
	t.Parallel()
	s := open(t)
	const tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.OrderTraceInsert(t.Context(), "ord-1", tp1); err != nil {
			return err
		}
		return tx.OrderTraceInsert(t.Context(), "ord-1", tp2) // ignored: the first is kept
	})
	traces := read(t, s, func(tx store.Tx) (map[string]string, error) {
		return tx.OrderTraces(t.Context(), []string{"ord-1", "ord-2"})
	})
	if len(traces) != 1 || traces["ord-1"] != tp1 {
		t.Errorf("OrderTraces = %v, want only ord-1 with its first traceparent", traces)
	}
	inTx(t, s, func(tx store.Tx) error {
		return tx.OutboxInsert(t.Context(), []*store.OutboxInsertParams{
			{Topic: "order.closed", Key: "ord-1", Payload: []byte(`{}`), Sequence: 1, Now: t0, TraceParent: tp2},
			{Topic: "order.closed", Key: "ord-2", Payload: []byte(`{}`), Sequence: 1, Now: t0},
		})
	})
	msgs := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxList(t.Context(), orderly.MessagePending, 10)
	})
	if len(msgs) != 2 || msgs[0].TraceParent != tp2 || msgs[1].TraceParent != "" {
		t.Errorf("outbox trace parents = %+v, want %q then \"\" (an untraced context)", msgs, tp2)
	}
}

func testOutboxBacklog(t *testing.T, open opener) {
	t.Parallel()
	s := open(t)
	type backlog struct {
		pending, dead int64
		oldest        time.Time
		ok            bool
	}
	get := func() backlog {
		return read(t, s, func(tx store.Tx) (backlog, error) {
			var b backlog
			var err error
			b.pending, b.dead, b.oldest, b.ok, err = tx.OutboxBacklog(context.WithoutCancel(t.Context()))
			return b, err
		})
	}
	if b := get(); b.pending != 0 || b.dead != 0 || b.ok {
		t.Errorf("empty backlog = %+v", b)
	}
	inTx(t, s, func(tx store.Tx) error {
		return tx.OutboxInsert(t.Context(), []*store.OutboxInsertParams{
			{Topic: "t", Key: "k1", Payload: []byte(`{}`), Now: t0.Add(time.Minute)},
			{Topic: "t", Key: "k2", Payload: []byte(`{}`), Now: t0},
			{Topic: "t", Key: "k3", Payload: []byte(`{}`), Now: t0.Add(2 * time.Minute)},
		})
	})
	msgs := read(t, s, func(tx store.Tx) ([]*orderly.Message, error) {
		return tx.OutboxList(t.Context(), orderly.MessagePending, 10)
	})
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.OutboxMarkFailed(t.Context(), &store.OutboxMarkFailedParams{ID: msgs[1].ID, LastError: "x", Dead: true}); err != nil {
			return err
		}
		return tx.OutboxMarkDelivered(t.Context(), []int64{msgs[2].ID}, t0)
	})
	if b := get(); b.pending != 1 || b.dead != 1 || !b.ok || !b.oldest.Equal(t0.Add(time.Minute)) {
		t.Errorf("backlog = %+v, want 1 pending created at %v and 1 dead", b, t0.Add(time.Minute))
	}
}
