package payment_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
)

// orderMessages returns the events about orderID in the outbox (orderly.IsOrderEvent),
// whatever their state, in delivery (id) order.
func orderMessages(t *testing.T, e *enginetest.Env, orderID string) []*orderly.Message {
	t.Helper()
	var out []*orderly.Message
	e.Read(t, func(tx store.Tx) error {
		for _, state := range []string{orderly.MessagePending, orderly.MessageDelivered, orderly.MessageDead} {
			msgs, err := tx.OutboxList(context.Background(), state, 10_000)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if m.Key == orderID && orderly.IsOrderEvent(m.Topic) {
					out = append(out, m)
				}
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b *orderly.Message) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// orderEvents returns "<topic> <row sequence>/<payload sequence>" for each event about
// orderID, in delivery order.
func orderEvents(t *testing.T, e *enginetest.Env, orderID string) []string {
	t.Helper()
	var out []string
	for _, m := range orderMessages(t, e, orderID) {
		var p struct {
			Sequence int64 `json:"sequence"`
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %d/%d", m.Topic, m.Sequence, p.Sequence))
	}
	return out
}

// wantMetadata checks the "metadata" member of the payloads of orderID's events, in
// order: each "<topic> <metadata JSON>", {} for none.
func wantMetadata(t *testing.T, e *enginetest.Env, orderID string, want ...string) {
	t.Helper()
	var got []string
	for _, m := range orderMessages(t, e, orderID) {
		var p struct {
			Metadata orderly.Metadata `json:"metadata"`
		}
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			t.Fatal(err)
		}
		md, _ := json.Marshal(metadataOrEmpty(p.Metadata))
		got = append(got, fmt.Sprintf("%s %s", m.Topic, md))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("metadata of the events of order %s:\n got %q\nwant %q", orderID, got, want)
	}
}

func metadataOrEmpty(m orderly.Metadata) orderly.Metadata {
	if m == nil {
		return orderly.Metadata{}
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// wantSequences checks that the events of an order are the topics of want, in order, and
// numbered 1, 2, 3… in the row and in the payload alike: no zero, no gap, no repeat.
func wantSequences(t *testing.T, e *enginetest.Env, orderID string, want ...string) {
	t.Helper()
	got := orderEvents(t, e, orderID)
	exp := make([]string, len(want))
	for i, topic := range want {
		exp[i] = fmt.Sprintf("%s %d/%d", topic, i+1, i+1)
	}
	if strings.Join(got, ", ") != strings.Join(exp, ", ") {
		t.Fatalf("events of order %s:\n got %v\nwant %v", orderID, got, exp)
	}
}

// TestEveryOrderEventIsSequenced walks orders through every path that writes an event
// about an order — pay, ship (which publishes nothing), a partial refund, a refund the gateway refuses, the
// merchant's refund of the rest, a close for timeout and a late payment refunded — and
// checks that each event carries the order's next sequence (1..n, in the outbox row, the
// payload and so the webhook body and Orderly-Sequence header). refund.succeeded,
// refund.failed and order.refunded used to be written with sequence 0, which consumers
// drop as stale.
func TestEveryOrderEventIsSequenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var inner outbox.Handler
	refuse := false
	h := outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error { return inner.Call(ctx, m) },
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			return inner.Apply(ctx, tx, msgs)
		},
	}
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	refusing, err := payment.NewService(payment.Config{Store: e.Store, Gateway: refusingGateway{e.Gateway}})
	if err != nil {
		t.Fatal(err)
	}
	setGateway := func() {
		inner = e.Payments.RefundExecuteHandler()
		if refuse {
			inner = refusing.RefundExecuteHandler()
		}
	}
	setGateway()

	o, _ := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 2, UnitPrice: 500})
	if _, err := e.Orders.ApplyEvent(ctx, o.ID, orderly.EventShip, "merchant", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Orders.UpdateMetadata(ctx, orderly.MetadataOfOrder, o.ID, orderly.MetadataPatch{"cart": ptr("c-1")}); err != nil {
		t.Fatal(err)
	}
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 300, Metadata: orderly.Metadata{"rma": "R-300"}})
	e.Drain(t)
	refuse = true
	setGateway()
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 200, Metadata: orderly.Metadata{"rma": "R-200"}})
	e.Drain(t)
	refuse = false
	setGateway()
	if _, err := e.Orders.ApplyEvent(ctx, o.ID, orderly.EventRefund, "merchant", ""); err != nil {
		t.Fatal(err)
	}
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1000)
	wantSequences(t, e, o.ID, orderly.TopicOrderPaid, orderly.TopicRefundSucceeded, orderly.TopicRefundFailed,
		orderly.TopicOrderRefunded, orderly.TopicRefundSucceeded)
	// Each event carries the metadata of the object it names: the order's, or the refund's.
	wantMetadata(t, e, o.ID, `order.paid {}`, `refund.succeeded {"rma":"R-300"}`, `refund.failed {"rma":"R-200"}`,
		`order.refunded {"cart":"c-1"}`, `refund.succeeded {}`)

	// Closed for timeout, then paid late: the capture is refunded.
	e.SetStock(t, "SKU-2", 10)
	c, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "user-2", Currency: "USD", PaymentTimeoutSeconds: 60,
		Items: []orderly.Item{{SKU: "SKU-2", Quantity: 1, UnitPrice: 700}}, Metadata: orderly.Metadata{"cart": "c-2"}})
	if err != nil {
		t.Fatal(err)
	}
	late := start(t, e, c)
	if _, err := e.Orders.UpdateMetadata(ctx, orderly.MetadataOfPayment, late.ID, orderly.MetadataPatch{"attempt": ptr("a-1")}); err != nil {
		t.Fatal(err)
	}
	payLate(t, e, c, late)
	e.Drain(t)
	wantSequences(t, e, c.ID, orderly.TopicOrderClosed, orderly.TopicPaymentRefunded)
	wantMetadata(t, e, c.ID, `order.closed {"cart":"c-2"}`, `payment.refunded {"attempt":"a-1"}`)
	wantVerified(t, e)
}
