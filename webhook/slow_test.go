package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/webhook"
)

// waitFor polls cond every 5 ms until it holds or bound passes; it returns how long that
// took and whether cond held.
func waitFor(bound time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > bound {
			return time.Since(start), false
		}
		<-tick.C
	}
	return time.Since(start), true
}

// TestSlowSubscriberHoldsBackNothingElse: a subscriber that never answers (each delivery
// waits for the webhook timeout, 5 s) must not delay a gateway refund, the events of other
// orders, or another subscriber's deliveries. The relay used to call every message of a
// batch one after another in one loop: with two paid orders, a refund stayed requested for
// 20 s behind the slow subscriber's two deliveries.
func TestSlowSubscriberHoldsBackNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	svc, err := webhook.New(webhook.Config{Store: e.Store})
	if err != nil {
		t.Fatal(err)
	}

	var slowCalls, slowInFlight atomic.Int64
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slowCalls.Add(1)
		slowInFlight.Add(1)
		defer slowInFlight.Add(-1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // runs first: the slow handlers return
	fast := newReceiver(t, nil)
	if _, _, err := svc.Subscribe(ctx, slow.URL+"/slow", []string{orderly.TopicOrderPaid}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Subscribe(ctx, fast.srv.URL+"/fast", []string{orderly.WebhookAllTopics}, ""); err != nil {
		t.Fatal(err)
	}

	if err := e.Relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Relay.Stop)

	e.SetStock(t, "SKU-1", 10)
	newOrder := func(user string) *orderly.Order {
		o, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: user, Currency: "USD", PaymentTimeoutSeconds: 60,
			Items: []orderly.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 500}}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	var paid []*orderly.Order
	for _, user := range []string{"u-1", "u-2"} {
		o := newOrder(user)
		p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: "txn-" + user,
			Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: time.Now().UTC()}); err != nil || !res.Applied {
			t.Fatalf("pay: %+v, %v", res, err)
		}
		e.Relay.Notify()
		paid = append(paid, o)
	}
	if _, ok := waitFor(3*time.Second, func() bool { return slowInFlight.Load() > 0 }); !ok {
		t.Fatal("the slow subscriber got no delivery")
	}

	// While it hangs: a refund, the close of an unrelated order, and the other subscriber.
	start := time.Now()
	if _, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: paid[1].ID, Amount: 100}); err != nil {
		t.Fatal(err)
	}
	e.Relay.Notify()
	const bound = 2 * time.Second // the webhook timeout is 5 s
	if took, ok := waitFor(bound, func() bool {
		fs, err := e.Orders.OrderRefunds(ctx, paid[1].ID)
		return err == nil && len(fs) == 1 && fs[0].State == orderly.RefundSucceeded
	}); !ok {
		t.Fatalf("refund still requested after %s while a subscriber hangs", took)
	}
	// (Cancelled, not timed out: moving the clock past close_at would also end the leases of
	// the hanging deliveries, which the relay would then claim again.)
	unpaid := newOrder("u-3")
	if _, err := e.Orders.CancelOrder(ctx, unpaid.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	e.Relay.Notify()
	want := map[string]bool{
		orderly.TopicOrderPaid + " " + paid[0].ID:       true,
		orderly.TopicOrderPaid + " " + paid[1].ID:       true,
		orderly.TopicRefundSucceeded + " " + paid[1].ID: true,
		orderly.TopicOrderClosed + " " + unpaid.ID:      true,
	}
	if took, ok := waitFor(bound, func() bool {
		n := 0
		for _, c := range fast.got() {
			if want[c.env.Topic+" "+c.env.Key] {
				n++
			}
		}
		return n == len(want)
	}); !ok {
		var got []string
		for _, c := range fast.got() {
			got = append(got, c.env.Topic+" "+c.env.Key)
		}
		t.Fatalf("after %s the other subscriber got %v, want the 4 events of %v", took, got, want)
	}
	if elapsed := time.Since(start); slowInFlight.Load() == 0 || elapsed > 2*bound {
		t.Fatalf("the slow subscriber is no longer hanging (%d in flight) or the checks took %s: the test proved nothing",
			slowInFlight.Load(), elapsed)
	}
	if n := slowCalls.Load(); n < 1 || n > 2 {
		t.Errorf("slow subscriber called %d times, want its 1 or 2 order.paid deliveries", n)
	}
}
