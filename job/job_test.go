package job_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T, clock *enginetest.Clock) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: sqlitetest.Path(t), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestPausedHolderIsFenced: instance A takes the sweep lease and is paused (SIGSTOP, a GC
// pause) past the lease; B takes over with the next token and runs; when A resumes, its
// write is refused by the fence, so exactly one runner's writes land. Both runs are
// recorded.
func TestPausedHolderIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &enginetest.Clock{}
	clock.Set(enginetest.Start)
	s := openStore(t, clock)
	if err := s.InTx(ctx, func(tx store.Tx) error { _, err := tx.StockSet(ctx, "writes", 0); return err }); err != nil {
		t.Fatal(err)
	}
	// write adds one to a counter under the fence, like a sweep's close transaction.
	write := func(ctx context.Context, fence job.Fence) (int64, int64, error) {
		err := s.InTx(ctx, func(tx store.Tx) error {
			if err := fence(ctx, tx); err != nil {
				return err
			}
			st, err := tx.StockGet(ctx, "writes")
			if err != nil {
				return err
			}
			_, err = tx.StockSet(ctx, "writes", st.Available+1)
			return err
		})
		if err != nil {
			return 1, 0, err
		}
		return 1, 1, nil
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	a, err := job.New(job.Config{Store: s, Name: "sweep", Instance: "A", Interval: time.Second, TTL: 10 * time.Second,
		Timeout: time.Minute, Run: func(ctx context.Context, fence job.Fence) (int64, int64, error) {
			close(paused)
			<-resume
			return write(ctx, fence)
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := job.New(job.Config{Store: s, Name: "sweep", Instance: "B", Interval: time.Second, TTL: 10 * time.Second, Run: write})
	if err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() {
		ran, err := a.RunOnce(ctx)
		if !ran && err == nil {
			err = errors.New("A did not run")
		}
		aDone <- err
	}()
	<-paused
	if ran, err := b.RunOnce(ctx); ran || err != nil {
		t.Fatalf("B ran (%v, %v) while A holds the lease", ran, err)
	}
	clock.Advance(11 * time.Second) // A stays paused past its 10 s lease
	if ran, err := b.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("B after A's lease expired: ran %v, %v", ran, err)
	}
	close(resume)
	if err := <-aDone; !errors.Is(err, job.ErrLeaseLost) {
		t.Fatalf("stale A: %v, want ErrLeaseLost", err)
	}
	var (
		writes *orderly.Stock
		runs   []*store.JobRun
	)
	err = s.Read(ctx, func(tx store.Tx) (err error) {
		if writes, err = tx.StockGet(ctx, "writes"); err != nil {
			return err
		}
		runs, err = tx.JobRunList(ctx, "sweep", 10)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if writes.Available != 1 {
		t.Fatalf("%d writes landed, want exactly B's one", writes.Available)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs recorded, want 2", len(runs))
	}
	byInstance := map[string]*store.JobRun{runs[0].Instance: runs[0], runs[1].Instance: runs[1]}
	if r := byInstance["B"]; r == nil || r.Token != 2 || r.Changed != 1 || r.Error != "" {
		t.Fatalf("B's run %+v, want token 2, 1 change, no error", r)
	}
	if r := byInstance["A"]; r == nil || r.Token != 1 || r.Changed != 0 || r.Error != job.ErrLeaseLost.Error() {
		t.Fatalf("A's run %+v, want token 1, nothing changed, lease lost", r)
	}
}

// TestStopReleasesLease: a graceful stop hands the lease over at once.
func TestStopReleasesLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &enginetest.Clock{}
	clock.Set(enginetest.Start)
	s := openStore(t, clock)
	noop := func(context.Context, job.Fence) (int64, int64, error) { return 0, 0, nil }
	a, _ := job.New(job.Config{Store: s, Name: "deep_check", Instance: "A", Interval: time.Hour, Run: noop})
	b, _ := job.New(job.Config{Store: s, Name: "deep_check", Instance: "B", Interval: time.Hour, Run: noop})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if ran, err := a.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("A: %v, %v", ran, err)
	}
	if ran, _ := b.RunOnce(ctx); ran {
		t.Fatal("B ran while A holds the lease")
	}
	a.Stop()
	a.Stop()
	if ran, err := b.RunOnce(ctx); !ran || err != nil {
		t.Fatalf("B after A stopped: %v, %v", ran, err)
	}
}

// TestRunFailedAfterLeaseLost: A's run fails with an error of its own (the database ended
// its session while A was stopped, or its deadline passed) after B took the lease over.
// The run is recorded as lease lost, with A's error kept, so job runs show why A stopped.
func TestRunFailedAfterLeaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &enginetest.Clock{}
	clock.Set(enginetest.Start)
	s := openStore(t, clock)
	errSession := errors.New("commit: terminating connection due to idle-in-transaction timeout")
	noop := func(context.Context, job.Fence) (int64, int64, error) { return 0, 0, nil }
	b, _ := job.New(job.Config{Store: s, Name: "sweep", Instance: "B", Interval: time.Second, TTL: 10 * time.Second, Run: noop})
	for _, tc := range []struct {
		name     string
		takeover bool // B takes the lease while A is stopped
		want     string
	}{
		{"lease kept", false, "job sweep: " + errSession.Error()},
		{"lease taken over", true, "job sweep: " + job.ErrLeaseLost.Error() + ": " + errSession.Error()},
	} {
		a, _ := job.New(job.Config{Store: s, Name: "sweep", Instance: "A", Interval: time.Second, TTL: 10 * time.Second,
			Timeout: time.Minute, Run: func(context.Context, job.Fence) (int64, int64, error) {
				if tc.takeover {
					clock.Advance(11 * time.Second)
					if ran, err := b.RunOnce(ctx); !ran || err != nil {
						return 0, 0, fmt.Errorf("B's takeover: ran %v, %w", ran, err)
					}
				}
				return 5, 0, errSession
			}})
		ran, err := a.RunOnce(ctx)
		if !ran || err == nil || err.Error() != tc.want {
			t.Fatalf("%s: A ran %v, %v; want %q", tc.name, ran, err, tc.want)
		}
		if got := errors.Is(err, job.ErrLeaseLost); got != tc.takeover {
			t.Errorf("%s: errors.Is(err, ErrLeaseLost) = %v, want %v", tc.name, got, tc.takeover)
		}
		var runs []*store.JobRun
		if err := s.Read(ctx, func(tx store.Tx) (err error) { runs, err = tx.JobRunList(ctx, "sweep", 10); return err }); err != nil {
			t.Fatal(err)
		}
		var last *store.JobRun
		for _, r := range runs {
			if r.Instance == "A" {
				last = r
				break
			}
		}
		if wantErr := strings.TrimPrefix(tc.want, "job sweep: "); last == nil || last.Error != wantErr || last.Scanned != 5 {
			t.Errorf("%s: A's recorded run %+v, want error %q, 5 scanned", tc.name, last, wantErr)
		}
		// Hand the lease back to A for the next case.
		clock.Advance(11 * time.Second)
	}
}
