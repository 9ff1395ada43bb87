package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/orderlyhq/orderly/bench"
)

// peer schedules one close job per order at its close_at and runs the workers that do the
// close (shop.closeOrder).
type peer interface {
	// Name is the row's name in the table.
	Name() string
	// Supports reports whether the peer runs on the dialect.
	Supports(dialect string) bool
	// Start starts the workers on db.
	Start(ctx context.Context, db *bench.DB, s *shop) error
	// Schedule enqueues the close jobs of ids at closeAt (unix ms).
	Schedule(ctx context.Context, ids []string, closeAt []int64) error
	// Stop stops the workers and frees what Start took.
	Stop()
}

// ---- River -------------------------------------------------------------------------

type closeArgs struct {
	OrderID string `json:"order_id"`
}

func (closeArgs) Kind() string { return "close_order" }

type closeWorker struct {
	river.WorkerDefaults[closeArgs]
	shop *shop
}

func (w *closeWorker) Work(ctx context.Context, job *river.Job[closeArgs]) error {
	return w.shop.closeOrder(ctx, job.Args.OrderID)
}

// riverPeer is River on PostgreSQL (riverpgxv5): default fetch settings, or tuned (fetch
// poll 20 ms, cooldown 2 ms). 100 workers.
type riverPeer struct {
	tuned  bool
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

func (p *riverPeer) Name() string {
	if p.tuned {
		return "River tuned (poll 20 ms, cooldown 2 ms)"
	}
	return "River default"
}

func (p *riverPeer) Supports(dialect string) bool { return dialect == "postgres" }

func (p *riverPeer) Start(ctx context.Context, db *bench.DB, s *shop) error {
	var err error
	if p.pool, err = pgxpool.New(ctx, db.URL); err != nil {
		return err
	}
	driver := riverpgxv5.New(p.pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: db.Schema(), Logger: quiet()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &closeWorker{shop: s})
	cfg := &river.Config{Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}}, Workers: workers,
		Schema: db.Schema(), Logger: quiet()}
	if p.tuned {
		cfg.FetchPollInterval, cfg.FetchCooldown = 20*time.Millisecond, 2*time.Millisecond
	}
	if p.client, err = river.NewClient(driver, cfg); err != nil {
		return err
	}
	return p.client.Start(ctx)
}

func (p *riverPeer) Schedule(ctx context.Context, ids []string, closeAt []int64) error {
	params := make([]river.InsertManyParams, 0, 1000)
	for i, id := range ids {
		params = append(params, river.InsertManyParams{Args: closeArgs{OrderID: id},
			InsertOpts: &river.InsertOpts{ScheduledAt: time.UnixMilli(closeAt[i])}})
		if len(params) == cap(params) || i == len(ids)-1 {
			if _, err := p.client.InsertMany(ctx, params); err != nil {
				return err
			}
			params = params[:0]
		}
	}
	return nil
}

func (p *riverPeer) Stop() {
	if p.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = p.client.Stop(ctx)
		cancel()
	}
	if p.pool != nil {
		p.pool.Close()
	}
}

// ---- asynq -------------------------------------------------------------------------

// asynqPeer is asynq on Redis: a task per order with ProcessAt(close_at), a queue of its
// own per run (deleted at the end), 20 workers, the default delayed-task check (5 s).
type asynqPeer struct {
	redisURL string
	queue    string
	opt      asynq.RedisConnOpt
	client   *asynq.Client
	server   *asynq.Server
}

func (p *asynqPeer) Name() string                 { return "asynq (ProcessAt)" }
func (p *asynqPeer) Supports(dialect string) bool { return p.redisURL != "" }

func (p *asynqPeer) Start(_ context.Context, _ *bench.DB, s *shop) error {
	var err error
	if p.opt, err = asynq.ParseRedisURI(p.redisURL); err != nil {
		return err
	}
	p.queue = "orderly-bench-" + fmt.Sprint(time.Now().UnixNano())
	p.client = asynq.NewClient(p.opt)
	p.server = asynq.NewServer(p.opt, asynq.Config{Concurrency: 20, Queues: map[string]int{p.queue: 1}, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("close_order", func(ctx context.Context, t *asynq.Task) error {
		return s.closeOrder(ctx, string(t.Payload()))
	})
	return p.server.Start(mux)
}

func (p *asynqPeer) Schedule(ctx context.Context, ids []string, closeAt []int64) error {
	// asynq enqueues one task per call: 16 at once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				_, err := p.client.EnqueueContext(ctx, asynq.NewTask("close_order", []byte(ids[i])),
					asynq.ProcessAt(time.UnixMilli(closeAt[i])), asynq.Queue(p.queue), asynq.MaxRetry(3))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func (p *asynqPeer) Stop() {
	if p.server != nil {
		p.server.Shutdown()
	}
	if p.client != nil {
		_ = p.client.Close()
	}
	if p.opt != nil {
		in := asynq.NewInspector(p.opt)
		_ = in.DeleteQueue(p.queue, true)
		_ = in.Close()
	}
}

// ---- periodic scan -----------------------------------------------------------------

// scanPeer is the common hand-written design: every 15 s, select the due open orders
// (1000 at a time, until a short batch) and close them one by one, 4 at a time.
type scanPeer struct {
	interval time.Duration
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func (p *scanPeer) Name() string                                      { return fmt.Sprintf("periodic scan (%s)", p.interval) }
func (p *scanPeer) Supports(string) bool                              { return true }
func (p *scanPeer) Schedule(context.Context, []string, []int64) error { return nil }

func (p *scanPeer) Start(ctx context.Context, _ *bench.DB, s *shop) error {
	ctx, p.cancel = context.WithCancel(ctx)
	p.wg.Go(func() {
		tick := time.NewTicker(p.interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for ctx.Err() == nil {
				ids, err := s.dueIDs(ctx)
				if err != nil {
					break
				}
				work := make(chan string)
				var wg sync.WaitGroup
				for range 4 {
					wg.Go(func() {
						for id := range work {
							_ = s.closeOrder(ctx, id)
						}
					})
				}
				for _, id := range ids {
					work <- id
				}
				close(work)
				wg.Wait()
				if len(ids) < 1000 {
					break
				}
			}
		}
	})
	return nil
}

func (p *scanPeer) Stop() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
