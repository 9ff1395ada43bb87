package engine_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/feature"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// ticketsFeature is a feature that lives only in this test: a flow "tickets" whose unpaid
// orders close at their payment deadline, running its own effect "tickets.count" in the
// close's transaction, and a service that counts what the effect saw.
type ticketsService struct{ closed atomic.Int64 }

func ticketsFeature(svc *ticketsService) feature.Feature {
	flow := &orderly.Flow{Name: "tickets", Initial: orderly.StatePendingPayment,
		Transitions: []orderly.FlowTransition{
			{From: orderly.StatePendingPayment, Event: orderly.EventTimeout, To: orderly.StateClosed,
				Effects: append(slices.Clone(orderly.CloseEffects), "tickets.count")},
		},
		Timed: []orderly.TimedState{{State: orderly.StatePendingPayment, Deadline: orderly.DeadlinePayment,
			Event: orderly.EventTimeout, CloseReason: orderly.CloseReasonPaymentTimeout}},
	}
	return feature.Feature{Name: "tickets", Flows: []*orderly.Flow{flow},
		Effects: map[string]order.Effect{"tickets.count": func(_ context.Context, _ store.Tx, b *order.EffectBatch) error {
			svc.closed.Add(int64(len(b.IDs)))
			return nil
		}},
		Build: func(*feature.Core) (*feature.Parts, error) { return &feature.Parts{Service: svc}, nil },
	}
}

// TestFeatureEndToEnd checks that a feature engine.Open knows nothing of runs end to end
// through it: an order of its flow is created, closed at its deadline by the one timer,
// its effect ran once, and the history shows the close.
func TestFeatureEndToEnd(t *testing.T) {
	t.Parallel()
	svc := &ticketsService{}
	e, err := engine.Open(t.Context(), config(t), feature.Standard(), ticketsFeature(svc))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := e.Service("tickets"); got != svc {
		t.Errorf("Service(tickets) = %v, want the feature's", got)
	}
	if _, err := e.Orders().SetStock(t.Context(), "seat", 3); err != nil {
		t.Fatal(err)
	}
	o, _, err := e.Orders().CreateOrder(t.Context(), &orderly.CreateOrderParams{UserID: "u", Currency: "EUR", Flow: "tickets",
		PaymentTimeoutSeconds: 1, Items: []orderly.Item{{SKU: "seat", Quantity: 2, UnitPrice: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := e.Orders().Order(t.Context(), o.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == orderly.StateClosed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s is %s 15 s after its 1 s deadline, want closed", o.ID, got.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := svc.closed.Load(); n != 1 {
		t.Errorf("the feature's effect saw %d closed orders, want 1", n)
	}
	hist, err := e.Orders().OrderHistory(t.Context(), o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].To != orderly.StatePendingPayment || hist[1].Event != orderly.EventTimeout ||
		hist[1].To != orderly.StateClosed {
		t.Errorf("history = %+v, want create then timeout → closed", hist)
	}
}
