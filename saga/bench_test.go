package saga_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// BenchmarkSaga4Steps runs sagas of four steps whose participants are local (LocalTx):
// each writes one row (a coupon) in the transaction that records its step, as the steps
// of a wallet checkout (stock, coupon, wallet debit, paid) would. Work per saga: 1
// transaction (the start and the four local steps) and 10 row writes (the instance's
// insert and its update to succeeded; per step the participant's row and the step log
// row), 4 savepoints and 5 reads of the database clock. 16 callers
// run sagas at once. It reports sagas/s; on PostgreSQL when ORDERLY_TEST_POSTGRES_URL is
// set.
//
//	go test -run '^$' -bench Saga4Steps -benchtime 5000x ./saga/
func BenchmarkSaga4Steps(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		db, err := sqlstore.Open(b.Context(), sqlstore.Config{URL: filepath.Join(b.TempDir(), "bench.db")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		benchSagas(b, db)
	})
	b.Run("postgres", func(b *testing.B) {
		url := testdb.Fresh(b, testdb.URL(b, "postgres"))
		db, err := sqlstore.Open(b.Context(), sqlstore.Config{URL: url, MaxConns: 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = db.Close() })
		benchSagas(b, db)
	})
}

func benchSagas(b *testing.B, db store.Store) {
	step := func(name string) saga.Step {
		return saga.Step{Name: name, Action: saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			return tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/" + name, UserID: "u", AmountOff: 100, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
		})}
	}
	def := saga.Definition{Name: "checkout", Steps: []saga.Step{step("stock"), step("coupon"), step("wallet"), step("paid")}}
	o, err := saga.New(saga.Config{Store: db, Definitions: []saga.Definition{def}})
	if err != nil {
		b.Fatal(err)
	}
	const callers = 16
	var (
		next   atomic.Int64
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				inst, err := o.Run(context.Background(), &saga.StartParams{Definition: "checkout"})
				if err != nil || inst.State != saga.StateSucceeded {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d sagas did not succeed", n, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "sagas/s")
	b.ReportMetric(0, "ns/op")
}
