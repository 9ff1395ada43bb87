// Package job runs orderly's periodic jobs (sweep, deep check, outbox retention) under a
// lease, so that at most one instance runs each job at a time however many instances share
// the database (docs/operations/many-instances.md: leases). The lease is a database row with an owner, an expiry
// and a fencing token that increments at every change of owner; a job's write
// transactions call the fence first, so an instance that lost its lease while paused (GC,
// SIGSTOP, a slow disk) has its writes refused instead of racing the new owner. Every run
// is recorded in job_runs, which survives restarts.
package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// ErrLeaseLost is returned by a fence when this instance no longer holds the job's lease.
var ErrLeaseLost = errors.New("job: lease lost to another instance")

// Fence checks, inside a write transaction, that the runner still holds its lease with
// its token; it returns ErrLeaseLost otherwise, and the transaction must roll back.
type Fence func(ctx context.Context, tx store.Tx) error

// InFencedTx runs fn in a write transaction of st after fence (when not nil), with the
// database's clock (store.Tx.Now): the shape of every write transaction of a job.
func InFencedTx(ctx context.Context, st store.Store, fence Fence, fn func(tx store.Tx, now time.Time) error) error {
	return st.InTx(ctx, func(tx store.Tx) error {
		if fence != nil {
			if err := fence(ctx, tx); err != nil {
				return err
			}
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return fn(tx, now)
	})
}

// Func is one run of a job: it calls fence first in each of its write transactions and
// returns how many rows it looked at and changed.
type Func func(ctx context.Context, fence Fence) (scanned, changed int64, err error)

// Config configures a Runner. Zero values mean the documented defaults.
type Config struct {
	Store store.Store
	// Name names the job and its lease: "sweep", "deep_check", "outbox_retention".
	Name string
	// Instance identifies this process (host:pid or a configured id); required.
	Instance string
	// Interval is the period of the job; required.
	Interval time.Duration
	// TTL is how long a lease lasts without renewal; 2 × Interval, at least 10 s. The
	// holder renews it every Interval, so another instance takes over at most TTL after
	// the holder stops (at once after a graceful stop, which releases it).
	TTL time.Duration
	// Timeout bounds one run; Interval.
	Timeout time.Duration
	Run     Func
	Logger  *slog.Logger
	// Metrics, when set, receives orderly_job_run_seconds{job,outcome} and
	// orderly_job_changed_total{job} for every run this instance makes.
	Metrics *telemetry.Metrics
}

// Runner runs one job periodically under its lease. Start it once; Stop is idempotent.
type Runner struct {
	cfg    Config
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	token  int64 // the token of the lease last held, for Release
}

// New returns a Runner; it returns an error when a required field is missing.
func New(cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.Name == "" || cfg.Instance == "" || cfg.Interval <= 0 || cfg.Run == nil {
		return nil, errors.New("job: Store, Name, Instance, a positive Interval and Run are required")
	}
	if cfg.TTL < 0 || cfg.Timeout < 0 {
		return nil, errors.New("job: TTL and Timeout must not be negative")
	}
	cfg.TTL = cmp.Or(cfg.TTL, max(2*cfg.Interval, 10*time.Second))
	cfg.Timeout = cmp.Or(cfg.Timeout, cfg.Interval)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Runner{cfg: cfg}, nil
}

// Start runs the job every Interval in the background until ctx ends or Stop is called.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return fmt.Errorf("job %s: already started", r.cfg.Name)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		ticker := time.NewTicker(r.cfg.Interval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Error("job failed", "job", r.cfg.Name, "error", err)
			}
		}
	}()
	return nil
}

// Stop stops the runner, waits for a run in progress and releases the lease so another
// instance can take over at once. Safe to call twice.
func (r *Runner) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	r.mu.Lock()
	token := r.token
	r.mu.Unlock()
	if token > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			return tx.LeaseRelease(ctx, r.cfg.Name, r.cfg.Instance, token)
		}); err != nil {
			r.cfg.Logger.Warn("release lease", "job", r.cfg.Name, "error", err)
		}
	}
}

// RunOnce takes or renews the lease and, when it holds it, runs the job once and records
// the run. It reports whether it ran; a run that lost its lease midway returns
// ErrLeaseLost (and is recorded with that error).
func (r *Runner) RunOnce(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var (
		lease   *store.Lease
		held    bool
		started time.Time
	)
	err := r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		var err error
		if started, err = tx.Now(ctx); err != nil {
			return err
		}
		lease, held, err = tx.LeaseAcquire(ctx, &store.LeaseParams{Name: r.cfg.Name, Owner: r.cfg.Instance, Now: started, TTL: r.cfg.TTL})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("job %s: lease: %w", r.cfg.Name, err)
	}
	if !held {
		return false, nil
	}
	r.mu.Lock()
	r.token = lease.Token
	r.mu.Unlock()
	fence := func(ctx context.Context, tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		ok, err := tx.LeaseCheck(ctx, r.cfg.Name, r.cfg.Instance, lease.Token, now)
		if err != nil {
			return err
		} else if !ok {
			return ErrLeaseLost
		}
		return nil
	}
	runStart := time.Now()
	scanned, changed, runErr := r.cfg.Run(ctx, fence)
	if runErr != nil && !errors.Is(runErr, ErrLeaseLost) && !r.stillHeld(lease.Token) {
		// The run failed another way (its session ended by the database while this process
		// was stopped, its deadline passed) and the lease is gone meanwhile: that is the
		// cause worth recording, and the new owner has the job.
		runErr = fmt.Errorf("%w: %w", ErrLeaseLost, runErr)
	}
	run := &store.JobRun{Job: r.cfg.Name, Instance: r.cfg.Instance, Token: lease.Token, StartedAt: started,
		Scanned: scanned, Changed: changed}
	if runErr != nil {
		run.Error = runErr.Error()
	}
	if m := r.cfg.Metrics; m != nil {
		outcome := "ok"
		if runErr != nil {
			outcome = "error"
		}
		m.JobDuration.WithLabelValues(r.cfg.Name, outcome).Observe(time.Since(runStart).Seconds())
		m.JobChanged.WithLabelValues(r.cfg.Name).Add(float64(changed))
	}
	recordCtx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelRecord()
	if err := r.cfg.Store.InTx(recordCtx, func(tx store.Tx) error {
		var err error
		if run.FinishedAt, err = tx.Now(recordCtx); err != nil {
			return err
		}
		return tx.JobRunInsert(recordCtx, run)
	}); err != nil {
		return true, errors.Join(runErr, fmt.Errorf("job %s: record run: %w", r.cfg.Name, err))
	}
	if runErr != nil {
		return true, fmt.Errorf("job %s: %w", r.cfg.Name, runErr)
	}
	return true, nil
}

// stillHeld reports whether this runner still holds its lease with token, on the database
// clock; true when that cannot be read (the run's own error is recorded then).
func (r *Runner) stillHeld(token int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held := true
	err := r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		held, err = tx.LeaseCheck(ctx, r.cfg.Name, r.cfg.Instance, token, now)
		return err
	})
	return err != nil || held
}
