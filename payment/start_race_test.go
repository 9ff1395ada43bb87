package payment_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// undecidedAdapter is a payment channel whose provider creates every attempt and never
// tells its outcome: a query or a close answers "pending". So a second attempt for an order
// whose attempt is in flight is always refused (the first cannot be closed), and only
// attempts started at the same moment can race. It counts the attempts created.
type undecidedAdapter struct{ created atomic.Int64 }

func (a *undecidedAdapter) Name() string { return "undecided" }
func (a *undecidedAdapter) Create(context.Context, *orderly.Payment) (*orderly.GatewayAttempt, error) {
	a.created.Add(1)
	return &orderly.GatewayAttempt{}, nil
}
func (a *undecidedAdapter) Query(context.Context, *orderly.Payment) (*orderly.GatewayPayment, error) {
	return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
}
func (a *undecidedAdapter) Cancel(context.Context, *orderly.Payment) (*orderly.GatewayPayment, error) {
	return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
}
func (a *undecidedAdapter) Refund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "pending"}, nil
}
func (a *undecidedAdapter) QueryRefund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, Detail: "pending"}, nil
}
func (a *undecidedAdapter) Verify(http.Header, []byte, time.Time) (*channel.Notification, error) {
	return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "not used")
}
func (a *undecidedAdapter) Ack(http.ResponseWriter, error) {}

// TestConcurrentFirstAttempts: each round, 8 first payment attempts for one order start
// together behind a barrier, on every dialect. Exactly one starts: it is the order's
// current attempt, the only payment row of the order, the only attempt created at the
// provider and the only payment_started row of the audit trail. The others are refused,
// those that raced it with 409 payment-started-concurrently (the order's current attempt
// changed under them), those that came after it with 503 unavailable (its provider cannot
// close it), never anything else; the race happens at least once on the server dialects.
func TestConcurrentFirstAttempts(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testConcurrentFirstAttempts(t, dialect)
		})
	}
}

func testConcurrentFirstAttempts(t *testing.T, dialect string) {
	const rounds, racers = 40, 8
	ctx := context.Background()
	a := &undecidedAdapter{}
	e := enginetest.New(t, enginetest.Options{Dialect: dialect, Channels: []channel.Adapter{a}, DefaultChannel: "undecided"})
	e.SetStock(t, "SKU-1", rounds)
	codes := map[string]int{}
	for r := range rounds {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
		var (
			ready, done sync.WaitGroup
			barrier     = make(chan struct{})
			payments    = make([]*orderly.Payment, racers)
			errs        = make([]error, racers)
		)
		ready.Add(racers)
		for i := range racers {
			done.Go(func() {
				ready.Done()
				<-barrier
				payments[i], errs[i] = e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
			})
		}
		ready.Wait()
		close(barrier)
		done.Wait()

		var started *orderly.Payment
		for i := range racers {
			if errs[i] == nil {
				if started != nil {
					t.Fatalf("round %d: attempts %s and %s both started", r, started.ID, payments[i].ID)
				}
				started = payments[i]
				continue
			}
			code := orderly.ErrorCode(errs[i])
			if code != orderly.EPAYMENTRACE && code != orderly.EUNAVAILABLE {
				t.Fatalf("round %d: attempt %d refused %v, want %s or %s", r, i, errs[i], orderly.EPAYMENTRACE, orderly.EUNAVAILABLE)
			}
			codes[code]++
		}
		if started == nil {
			t.Fatalf("round %d: no attempt started (%v)", r, errs)
		}
		got := e.OrderOf(t, o.ID)
		var rows []*orderly.Payment
		e.Read(t, func(tx store.Tx) (err error) {
			rows, err = tx.PaymentList(ctx, o.ID)
			return err
		})
		startedRows := 0
		for _, tr := range e.Trail(t, o.ID) {
			if tr.Event == orderly.EventPaymentStarted {
				startedRows++
			}
		}
		if got.CurrentPaymentID != started.ID || got.PayStatus != orderly.PayPaying || len(rows) != 1 || rows[0].ID != started.ID || startedRows != 1 {
			t.Fatalf("round %d: order current attempt %q (%s), %d payment rows, %d payment_started rows; want %s the only one", r,
				got.CurrentPaymentID, got.PayStatus, len(rows), startedRows, started.ID)
		}
	}
	if got := a.created.Load(); got != rounds {
		t.Errorf("attempts created at the provider: %d, want %d (one per order)", got, rounds)
	}
	if dialect != "sqlite" && codes[orderly.EPAYMENTRACE] == 0 {
		// SQLite runs one write transaction at a time: there, attempts cannot race.
		t.Errorf("refusals %v: no attempt raced another in %d rounds of %d", codes, rounds, racers)
	}
	t.Logf("%s: refusals by code %v", dialect, codes)
}
