package checkout_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/checkout"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/testdb"
)

// BenchmarkWalletCheckout runs wallet checkouts (the saga wallet_checkout: order, stock,
// coupon, pay; no coupon named) through Engine.Checkout, 16 callers at once, over
// 1000 buyers with wallets that cover every checkout and 100 SKUs stocked for all of
// them. It reports checkouts/s. On SQLite the checkouts waiting at the same time share one
// write transaction (saga.Config.JoinRuns), each in a savepoint of its own; on PostgreSQL
// (when ORDERLY_TEST_POSTGRES_URL is set) each checkout has a transaction of its own.
//
//	go test -run '^$' -bench WalletCheckout -benchtime 3000x ./checkout/
func BenchmarkWalletCheckout(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchCheckout(b, filepath.Join(b.TempDir(), "bench.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchCheckout(b, testdb.Fresh(b, testdb.URL(b, "postgres")))
	})
}

func benchCheckout(b *testing.B, url string) {
	ctx := b.Context()
	e, err := engine.Open(ctx, engine.Config{Gateway: sim.New(), DatabaseURL: url, CallbackSecret: []byte("s"), DatabaseMaxConns: 20,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, features.All()...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close(context.Background()) })
	const buyers, skus, callers = 1000, 100, 16
	for i := range skus {
		if _, err := e.Orders().SetStock(ctx, fmt.Sprintf("sku-%d", i), int64(b.N)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range buyers {
		if _, err := e.Wallets().Credit(ctx, &orderly.WalletMoveParams{UserID: fmt.Sprintf("buyer-%d", i), Currency: "USD",
			Amount: int64(b.N) * 1000, IdempotencyKey: fmt.Sprintf("top-up-%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	var (
		next, failed atomic.Int64
		wg           sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				o, _, err := e.Service("wallet_checkout").(*checkout.Service).Checkout(context.Background(), &orderly.CreateOrderParams{
					UserID: fmt.Sprintf("buyer-%d", n%buyers), Currency: "USD", PaymentMethod: orderly.PaymentMethodWallet,
					Items: []orderly.Item{{SKU: fmt.Sprintf("sku-%d", n%skus), Quantity: 1, UnitPrice: 1000}}})
				if err != nil || o.State != orderly.StatePaid {
					if failed.Add(1) == 1 {
						b.Log(err)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d checkouts not paid", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checkouts/s")
	b.ReportMetric(0, "ns/op")
}
