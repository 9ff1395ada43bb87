package wallet_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/wallet"
)

// benchService opens a SQLite store on the database clock in b's temporary directory.
func benchService(b *testing.B) *wallet.Service {
	b.Helper()
	db, err := sqlstore.Open(b.Context(), sqlstore.Config{URL: filepath.Join(b.TempDir(), "bench.db")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	svc, err := wallet.NewService(wallet.Config{Store: db})
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

// BenchmarkDebit: debits of 1 minor unit from one of 64 funded wallets to the platform
// account, each one transaction (transfer row, two guarded balance updates, two entries),
// from GOMAXPROCS goroutines; reports debits/s.
//
//	go test ./wallet -run '^$' -bench Debit -benchtime 5000x
func BenchmarkDebit(b *testing.B) {
	svc := benchService(b)
	const users = 64
	for u := range users {
		if _, err := svc.Credit(b.Context(), &orderly.WalletMoveParams{UserID: fmt.Sprintf("u%d", u), Currency: "USD",
			Amount: 1 << 40, IdempotencyKey: fmt.Sprintf("seed-%d", u)}); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomicCounter
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.next()
			if _, err := svc.Debit(b.Context(), &orderly.WalletMoveParams{UserID: fmt.Sprintf("u%d", n%users), Currency: "USD",
				Amount: 1, IdempotencyKey: fmt.Sprintf("d-%d", n)}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "debits/s")
}

// BenchmarkHoldPost: a hold of 5000 then a post of 3820 (the rest released) per iteration,
// two transactions, on one of 64 funded wallets, from GOMAXPROCS goroutines; reports
// hold+post pairs per second.
//
//	go test ./wallet -run '^$' -bench HoldPost -benchtime 3000x
func BenchmarkHoldPost(b *testing.B) {
	svc := benchService(b)
	const users = 64
	for u := range users {
		if _, err := svc.Credit(b.Context(), &orderly.WalletMoveParams{UserID: fmt.Sprintf("u%d", u), Currency: "USD",
			Amount: 1 << 40, IdempotencyKey: fmt.Sprintf("seed-%d", u)}); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomicCounter
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.next()
			h, _, err := svc.Hold(b.Context(), &orderly.WalletHoldParams{UserID: fmt.Sprintf("u%d", n%users), Currency: "USD",
				Amount: 5000, TTL: time.Hour, IdempotencyKey: fmt.Sprintf("h-%d", n)})
			if err == nil {
				_, _, err = svc.Post(b.Context(), &orderly.WalletPostParams{HoldID: h.ID, Amount: 3820, IdempotencyKey: fmt.Sprintf("p-%d", n)})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "hold+post/s")
}

// atomicCounter numbers benchmark operations across goroutines.
type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int64 { return c.n.Add(1) }
