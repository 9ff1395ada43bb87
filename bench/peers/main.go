// Command orderly-peers runs orderly's bench scenarios steady and burst (package
// github.com/orderlyhq/orderly/bench) and the same work with the designs users compare
// orderly with: River scheduled jobs on PostgreSQL (default, and tuned: fetch poll 20 ms,
// cooldown 2 ms), asynq ProcessAt tasks on Redis, and a plain 15 s periodic scan. Each peer
// schedules one job per order at its close_at; the job does the guarded close and the
// releases on orderly's schema in one transaction. The peers' figures are printed next to
// orderly's, with ratios. It is its own Go module so that orderly's go.mod does not carry
// River and asynq; `orderly bench --peers` runs it.
//
//	go build -C bench/peers -o "$(dirname "$(command -v orderly)")/orderly-peers" .
//	orderly bench --peers steady --database-url postgres://… --redis-url redis://127.0.0.1:6379/0
//
// Orders of the peers are written directly in SQL (one transaction per create: stock held,
// order, reservation; 30 % paid at once), not over HTTP: their figures are the close path's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/orderlyhq/orderly/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	cfg        bench.Config
	json       bool
	scanEvery  time.Duration
	peerLead   time.Duration
	only       string
	scenarios  []string
	skipOrders bool
}

// parse reads flags and scenario names in any order (flag stops at the first argument
// that is not a flag; orderly bench passes its own command line through).
func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("orderly-peers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.cfg.Binary, "orderly-binary", "orderly", "the orderly executable")
	fs.StringVar(&o.cfg.DatabaseURL, "database-url", "", "empty: SQLite in a temporary directory; postgres://…: a new schema there per run")
	fs.StringVar(&o.cfg.Timer, "timer", "db", "orderly's --timer: db or redis")
	fs.StringVar(&o.cfg.RedisURL, "redis-url", "", "Redis of --timer redis and of asynq (asynq is skipped without it)")
	fs.BoolVar(&o.json, "json", false, "one JSON object per scenario, one per line")
	fs.StringVar(&o.cfg.CPUProfileDir, "cpu-profile-dir", "", "orderly's servers write CPU profiles here")
	fs.Float64Var(&o.cfg.Rate, "rate", 1000, "steady: orders per second")
	fs.DurationVar(&o.cfg.Duration, "duration", 20*time.Second, "steady: how long orders are created")
	fs.IntVar(&o.cfg.PaidPercent, "paid", 30, "steady: percent paid at once")
	fs.DurationVar(&o.cfg.PaymentTimeout, "payment-timeout", 2*time.Second, "steady: time to pay (whole seconds)")
	fs.IntVar(&o.cfg.Burst, "burst", 100_000, "burst: orders due in the same millisecond")
	fs.DurationVar(&o.cfg.BurstLead, "burst-lead", 5*time.Second, "burst: orderly's deadline lead")
	fs.DurationVar(&o.peerLead, "peer-lead", 60*time.Second, "burst: the peers' deadline lead (their jobs are enqueued after the orders are loaded)")
	fs.DurationVar(&o.scanEvery, "scan-interval", 15*time.Second, "the periodic scan's period")
	fs.StringVar(&o.only, "only", "", "run only the peers whose name contains this (and orderly)")
	fs.BoolVar(&o.skipOrders, "skip-orderly", false, "run the peers only")
	for _, name := range []string{"flash-stock", "flash-buyers", "workers", "history-orders", "pending-orders", "pending-baseline", "notify-orders", "instances"} {
		fs.String(name, "", "passed to orderly bench (scenarios without peers)")
	}
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			o.scenarios = append(o.scenarios, args[0])
			args = args[1:]
		}
	}
	if len(o.scenarios) == 0 {
		o.scenarios = []string{"steady", "burst"}
	}
	for _, s := range o.scenarios {
		if s != "steady" && s != "burst" {
			return nil, fmt.Errorf("peers run steady and burst only, not %q", s)
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "orderly-peers:", err)
		return 2
	}
	o.cfg.Progress = stderr
	dir, err := os.MkdirTemp("", "orderly-peers-")
	if err != nil {
		fmt.Fprintln(stderr, "orderly-peers:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	o.cfg.Dir = dir
	var violations []string
	for _, scenario := range o.scenarios {
		res := &bench.Result{Scenario: scenario, Store: o.cfg.Store()}
		if !o.skipOrders {
			out, err := bench.Run(ctx, scenario, o.cfg)
			if err != nil {
				fmt.Fprintln(stderr, "orderly-peers:", err)
				return 1
			}
			res = out.Result
			violations = append(violations, prefixed("orderly "+scenario, out.Violations)...)
		}
		dialect := "sqlite"
		if o.cfg.DatabaseURL != "" {
			dialect = "postgres"
		}
		peers := []peer{&riverPeer{}, &riverPeer{tuned: true}, &asynqPeer{redisURL: o.cfg.RedisURL}, &scanPeer{interval: o.scanEvery}}
		for _, p := range peers {
			if !p.Supports(dialect) || !strings.Contains(strings.ToLower(p.Name()), strings.ToLower(o.only)) {
				continue
			}
			fmt.Fprintf(stderr, "peers %s: %s\n", scenario, p.Name())
			var out *bench.Outcome
			var err error
			if scenario == "steady" {
				out, err = steady(ctx, o, p, filepath.Join(dir, fmt.Sprintf("%s-%d", scenario, len(res.Peers))))
			} else {
				out, err = burst(ctx, o, p, filepath.Join(dir, fmt.Sprintf("%s-%d", scenario, len(res.Peers))))
			}
			if err != nil {
				fmt.Fprintf(stderr, "orderly-peers: %s %s: %v\n", p.Name(), scenario, err)
				return 1
			}
			out.Result.Name = p.Name()
			res.Peers = append(res.Peers, out.Result)
			violations = append(violations, prefixed(p.Name()+" "+scenario, out.Violations)...)
		}
		if o.json {
			err = bench.WriteJSON(stdout, res)
		} else {
			err = bench.WriteTable(stdout, res)
		}
		if err != nil {
			fmt.Fprintln(stderr, "orderly-peers:", err)
			return 1
		}
	}
	if len(violations) > 0 {
		fmt.Fprintf(stderr, "orderly-peers: violations (these figures do not count):\n  %s\n", strings.Join(violations, "\n  "))
		return 1
	}
	return 0
}

func prefixed(p string, vs []string) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, p+": "+v)
	}
	return out
}

// steady creates orders at the configured rate (directly in SQL), schedules a close job
// for each unpaid one, and measures lateness once every order is paid or closed.
func steady(ctx context.Context, o *options, p peer, dir string) (*bench.Outcome, error) {
	cfg := o.cfg
	db, err := openPeerDB(ctx, cfg.DatabaseURL, dir)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	s := newShop(db)
	if err := p.Start(ctx, db, s); err != nil {
		return nil, err
	}
	defer p.Stop()
	since, err := db.Now(ctx)
	if err != nil {
		return nil, err
	}
	n := int(cfg.Rate * cfg.Duration.Seconds())
	var created atomic.Int64
	var firstErr atomic.Value
	_, sendS := bench.Pace(ctx, n, cfg.Rate, 64, cfg.Duration+30*time.Second, func(ctx context.Context, i int) {
		id := uuid.Must(uuid.NewV7()).String()
		now := time.Now().UnixMilli()
		closeAt := now + cfg.PaymentTimeout.Milliseconds()
		paid := i%100 < cfg.PaidPercent
		err := s.create(ctx, id, i, now, closeAt, paid)
		if err == nil && !paid {
			err = p.Schedule(ctx, []string{id}, []int64{closeAt})
		}
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
			return
		}
		created.Add(1)
	})
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	left, err := db.WaitClosed(ctx, since, cfg.PaymentTimeout+o.scanEvery+60*time.Second)
	if err != nil {
		return nil, err
	}
	cl, err := db.ReadCloses(ctx, since)
	if err != nil {
		return nil, err
	}
	res := &bench.Result{Orders: created.Load(), EarlyCloses: bench.Ptr(cl.Early), LatenessMS: cl.Lateness}
	if sendS > 0 {
		res.CreatedPerS = bench.Ptr(float64(int(float64(created.Load())/sendS*10)) / 10)
	}
	out := &bench.Outcome{Result: res}
	if cl.Early > 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders closed before close_at", cl.Early))
	}
	if left != 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders still open at the end of the wait", left))
	}
	return out, nil
}

// burst loads the orders (as orderly's burst does), sets one deadline for all, enqueues
// their jobs at it, and measures until every order is closed with its releases.
func burst(ctx context.Context, o *options, p peer, dir string) (*bench.Outcome, error) {
	cfg := o.cfg
	db, err := openPeerDB(ctx, cfg.DatabaseURL, dir)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	now, err := db.Now(ctx)
	if err != nil {
		return nil, err
	}
	ids, err := db.SeedOrders(ctx, bench.SeedOrders{N: cfg.Burst, State: "pending_payment", CreatedAt: now, CloseAt: now + 3_600_000, Coupons: true})
	if err != nil {
		return nil, err
	}
	if now, err = db.Now(ctx); err != nil {
		return nil, err
	}
	due := now + o.peerLead.Milliseconds()
	if err := db.MoveDeadlines(ctx, due); err != nil {
		return nil, err
	}
	if err := db.Analyze(ctx); err != nil {
		return nil, err
	}
	s := newShop(db)
	if err := p.Start(ctx, db, s); err != nil {
		return nil, err
	}
	defer p.Stop()
	at := make([]int64, len(ids))
	for i := range at {
		at[i] = due
	}
	if err := p.Schedule(ctx, ids, at); err != nil {
		return nil, err
	}
	if now, err = db.Now(ctx); err != nil {
		return nil, err
	}
	if now >= due {
		return nil, fmt.Errorf("jobs enqueued %d ms after the burst's deadline: raise --peer-lead", now-due)
	}
	fmt.Fprintf(o.cfg.Progress, "peers burst: jobs enqueued %d ms before the deadline\n", due-now)
	left, err := db.WaitClosed(ctx, 0, time.Duration(due-now)*time.Millisecond+10*time.Minute)
	if err != nil {
		return nil, err
	}
	return bench.BurstOutcome(ctx, db, due, left)
}

func openPeerDB(ctx context.Context, url, dir string) (*bench.DB, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	db, err := bench.OpenDB(ctx, url, dir)
	if err != nil {
		return nil, err
	}
	if err := db.SeedStock(ctx); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}
