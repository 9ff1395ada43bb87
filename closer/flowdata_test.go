package closer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// A flow that exists only in this file: a price quote holds stock until it is accepted or
// its deadline passes, when it expires (not "closed": a state of its own) and an effect of
// its own records the expiry. Nothing in the closer, the transition function or the store
// knows it.
const (
	stateQuoted   orderly.State = "quoted"
	stateAccepted orderly.State = "accepted"
	stateExpired  orderly.State = "expired"
	eventAccept   orderly.Event = "accept"
	eventExpire   orderly.Event = "expire"
)

var quoteFlow = &orderly.Flow{
	Name:    "quote",
	Initial: stateQuoted,
	Transitions: []orderly.FlowTransition{
		{From: stateQuoted, Event: eventAccept, To: stateAccepted, Effects: []string{orderly.EffectCommitReservations}},
		{From: stateQuoted, Event: eventExpire, To: stateExpired,
			Effects: []string{orderly.EffectReleaseReservations, "note_expiry", orderly.EffectPublish + "quote.expired"}},
	},
	Timed: []orderly.TimedState{{State: stateQuoted, Deadline: orderly.DeadlinePayment, Event: eventExpire}},
}

// TestFlowDefinedInATest runs a flow defined only in this test file (a table plus one
// effect) through create, its timed event at the deadline (never a millisecond before) and
// history, with the closer and the transition function as they are: flows are data.
func TestFlowDefinedInATest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var (
		mu    sync.Mutex
		now   = time.Date(2026, 11, 30, 8, 0, 0, 123_000_000, time.UTC)
		noted [][]string // the order ids of each note_expiry call
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setClock := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlitetest.Path(t), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })

	flows, err := orderly.NewFlows(orderly.StandardFlow, quoteFlow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := order.NewMachine(flows); err == nil {
		t.Fatal("a machine whose flow names an unregistered effect (note_expiry) was accepted")
	}
	m, err := order.NewMachine(flows, map[string]order.Effect{
		"note_expiry": func(_ context.Context, _ store.Tx, b *order.EffectBatch) error {
			noted = append(noted, slices.Clone(b.IDs))
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	orders, err := order.NewService(order.Config{Store: db, Machine: m})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := closer.New(closer.Config{Store: db, Machine: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(ctx, func(tx store.Tx) error { _, err := tx.StockSet(ctx, "SKU-Q", 10); return err }); err != nil {
		t.Fatal(err)
	}
	create := func(flow string) (*orderly.Order, error) {
		o, _, err := orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Flow: flow, Currency: "USD",
			Items: []orderly.Item{{SKU: "SKU-Q", Quantity: 3, UnitPrice: 500}}, PaymentTimeoutSeconds: 60})
		return o, err
	}
	if _, err := create("no_such_flow"); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("create with an unknown flow: %v, want %s", err, orderly.EINVALID)
	}
	q, err := create("quote")
	if err != nil {
		t.Fatal(err)
	}
	if q.State != stateQuoted || q.Flow != "quote" || !q.CloseAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("created %s/%s close_at %s", q.Flow, q.State, q.CloseAt)
	}
	stock := func() orderly.Stock {
		var s *orderly.Stock
		if err := db.Read(ctx, func(tx store.Tx) (err error) { s, err = tx.StockGet(ctx, "SKU-Q"); return err }); err != nil {
			t.Fatal(err)
		}
		return *s
	}
	if s := stock(); s.Available != 7 || s.Held != 3 {
		t.Fatalf("stock after the quote: %+v, want 3 held", s)
	}

	// A millisecond before the deadline nothing fires; at the deadline the quote expires.
	setClock(q.CloseAt.Add(-time.Millisecond))
	if res, err := cl.CloseDue(ctx, closer.TriggerTimer); err != nil || res.Closed != 0 {
		t.Fatalf("1 ms before the deadline: %+v, %v; want nothing", res, err)
	}
	setClock(q.CloseAt)
	if res, err := cl.CloseDue(ctx, closer.TriggerTimer); err != nil || res.Claimed != 1 || res.Closed != 1 {
		t.Fatalf("at the deadline: %+v, %v; want one expiry", res, err)
	}
	got, err := orders.Order(ctx, q.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != stateExpired || got.CloseReason != "" || got.ClosedAt != nil {
		t.Fatalf("after the deadline: %s (reason %q, closed_at %v), want expired", got.State, got.CloseReason, got.ClosedAt)
	}
	if s := stock(); s.Available != 10 || s.Held != 0 {
		t.Fatalf("stock after the expiry: %+v, want all 10 back (release_reservations ran)", s)
	}
	if len(noted) != 1 || len(noted[0]) != 1 || noted[0][0] != q.ID {
		t.Fatalf("note_expiry calls %v, want one with %s", noted, q.ID)
	}
	// Out of its timed state the order waits on nothing: the next pass finds nothing.
	if res, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil || res.Claimed != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing claimed", res, err)
	}
	var msgs []*orderly.Message
	if err := db.Read(ctx, func(tx store.Tx) (err error) { msgs, err = tx.OutboxList(ctx, orderly.MessagePending, 10); return err }); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].Topic != "quote.expired" || msgs[0].Key != q.ID || msgs[0].Sequence != 1 {
		t.Fatalf("outbox %+v, want one quote.expired event keyed by the order", msgs)
	}
	trail, err := orders.OrderHistory(ctx, q.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(trail) != 2 || trail[0].Event != orderly.EventCreate || trail[0].To != stateQuoted ||
		trail[1].From != stateQuoted || trail[1].To != stateExpired || trail[1].Event != eventExpire || trail[1].Actor != closer.TriggerTimer {
		t.Fatalf("history %+v", trail)
	}
}
