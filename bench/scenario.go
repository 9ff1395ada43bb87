package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Scenarios are the names Run takes, in the order `orderly bench` runs them.
var Scenarios = []string{"steady", "burst", "flash-sale", "history", "pending", "notify", "ceiling"}

// Config configures a bench run. Zero values mean the defaults documented per field.
type Config struct {
	// Binary is the orderly executable run as `orderly serve` (required).
	Binary string
	// DatabaseURL is "" for SQLite (a new file in Dir) or a postgres:// URL: every scenario
	// run gets a new schema there, dropped at its end.
	DatabaseURL string
	// Timer is the server's --timer: "db" (default) or "redis" (steady only; RedisURL).
	Timer    string
	RedisURL string
	// Dir holds SQLite files and the servers' logs; a new temporary directory when "".
	Dir string
	// CPUProfileDir, when set, makes each server write a CPU profile of its whole life
	// there (<scenario>-<store>-<n>.pprof).
	CPUProfileDir string
	// Progress receives one line per step; nil discards.
	Progress io.Writer

	// Rate is steady's orders per second (1000) for Duration (20 s); PaidPercent of them
	// (30) are paid at once, the rest close PaymentTimeout (2 s, whole seconds) after
	// creation.
	Rate           float64
	Duration       time.Duration
	PaidPercent    int
	PaymentTimeout time.Duration
	// Burst is the number of orders due in the same millisecond (100 000); BurstLead is how
	// far ahead of the database's clock their deadline is set before the server starts (5 s).
	Burst     int
	BurstLead time.Duration
	// FlashStock units of one SKU (5 000) for FlashBuyers buyers (20 000).
	FlashStock, FlashBuyers int
	// Workers is the number of requests in flight of the closed-loop scenarios (flash-sale,
	// notify): 64.
	Workers int
	// HistoryOrders is the number of closed orders loaded before history's steady run
	// (10 000 000).
	HistoryOrders int
	// PendingOrders (1 000 000) versus PendingBaseline (1 000) open orders at rest.
	PendingOrders, PendingBaseline int
	// NotifyOrders is the number of creates of notify (20 000) over Instances instances (3
	// on PostgreSQL; SQLite has one writer process, so 1).
	NotifyOrders, Instances int
}

func (c *Config) setDefaults() {
	c.Timer = cmp.Or(c.Timer, "db")
	c.Rate = cmp.Or(c.Rate, 1000)
	c.Duration = cmp.Or(c.Duration, 20*time.Second)
	if c.PaidPercent == 0 {
		c.PaidPercent = 30
	}
	c.PaidPercent = max(c.PaidPercent, 0)
	c.PaymentTimeout = cmp.Or(c.PaymentTimeout, 2*time.Second)
	c.Burst = cmp.Or(c.Burst, 100_000)
	c.BurstLead = cmp.Or(c.BurstLead, 5*time.Second)
	c.FlashStock = cmp.Or(c.FlashStock, 5000)
	c.FlashBuyers = cmp.Or(c.FlashBuyers, 20_000)
	c.Workers = cmp.Or(c.Workers, 64)
	c.HistoryOrders = cmp.Or(c.HistoryOrders, 10_000_000)
	c.PendingOrders = cmp.Or(c.PendingOrders, 1_000_000)
	c.PendingBaseline = cmp.Or(c.PendingBaseline, 1000)
	c.NotifyOrders = cmp.Or(c.NotifyOrders, 20_000)
	c.Instances = cmp.Or(c.Instances, 3)
}

func (c *Config) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("bench: no orderly binary")
	case c.Timer != "db" && c.Timer != "redis":
		return fmt.Errorf("bench: --timer must be db or redis, got %q", c.Timer)
	case c.Timer == "redis" && c.RedisURL == "":
		return errors.New("bench: --timer redis needs --redis-url")
	case c.PaymentTimeout%time.Second != 0:
		return fmt.Errorf("bench: --payment-timeout must be whole seconds, got %s", c.PaymentTimeout)
	case c.PaidPercent > 100:
		return fmt.Errorf("bench: --paid must be at most 100, got %d", c.PaidPercent)
	}
	return nil
}

// Store names the store of the run as Result.Store shows it.
func (c *Config) Store() string {
	s := "sqlite"
	if c.DatabaseURL != "" {
		s = "postgres"
	}
	if c.Timer == "redis" {
		s += "+redis"
	}
	return s
}

// Outcome is a scenario's figures and the invariants it saw broken (early closes, stock
// oversold, releases not applied). A figure from a run with violations does not count.
type Outcome struct {
	Result     *Result
	Violations []string
}

// Run runs one scenario (one of Scenarios) and returns its outcome. It starts and stops its
// own servers and databases. Errors: the scenario could not run (a server did not start,
// a database could not be reached, requests failed).
func Run(ctx context.Context, name string, cfg Config) (*Outcome, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "orderly-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	r := &runner{cfg: cfg, scenario: name}
	var out *Outcome
	var err error
	switch name {
	case "steady":
		out, err = r.steady(ctx)
	case "burst":
		out, err = r.burst(ctx)
	case "flash-sale":
		out, err = r.flashSale(ctx)
	case "history":
		out, err = r.history(ctx)
	case "pending":
		out, err = r.pending(ctx)
	case "notify":
		out, err = r.notify(ctx)
	case "ceiling":
		out, err = r.ceiling(ctx)
	default:
		return nil, fmt.Errorf("bench: unknown scenario %q (one of %s)", name, strings.Join(Scenarios, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	out.Result.Scenario, out.Result.Store = name, cfg.Store()
	return out, nil
}

// runner runs one scenario.
type runner struct {
	cfg      Config
	scenario string
	runs     atomic.Int64 // numbers databases, servers and profiles of the scenario
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "bench %s: %s\n", r.scenario, fmt.Sprintf(format, args...))
	}
}

// open makes the scenario's next empty database.
func (r *runner) open(ctx context.Context) (*DB, error) {
	dir := filepath.Join(r.cfg.Dir, fmt.Sprintf("%s-%d", r.scenario, r.runs.Add(1)))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return OpenDB(ctx, r.cfg.DatabaseURL, dir)
}

// start starts n servers on db, with the timer of the config.
func (r *runner) start(ctx context.Context, db *DB, n int, extra ...string) (*servers, error) {
	args := []string{"--log-level", "warn"}
	if r.cfg.Timer == "redis" {
		extra = append(extra, "--timer", "redis", "--redis-url", r.cfg.RedisURL, "--redis-prefix", "orderly-bench-"+randomHex(4))
	}
	if db.Dialect == "postgres" && n > 1 {
		extra = append(extra, "--database-max-conns", "10")
	}
	if r.cfg.CPUProfileDir != "" {
		extra = append(extra, "--cpu-profile", filepath.Join(r.cfg.CPUProfileDir,
			fmt.Sprintf("%s-%s-%d.pprof", r.scenario, r.cfg.Store(), r.runs.Load())))
	}
	dir := filepath.Dir(db.URL)
	if db.Dialect == "postgres" {
		dir = filepath.Join(r.cfg.Dir, fmt.Sprintf("%s-%d", r.scenario, r.runs.Load()))
	}
	return startServers(ctx, serverConfig{Binary: r.cfg.Binary, Instances: n, DatabaseURL: db.URL, Secret: "bench-secret-" + randomHex(8),
		Extra: extra, LogDir: dir, Global: args})
}

// steadyRun runs steady's traffic against servers on db and measures it.
func (r *runner) steadyRun(ctx context.Context, db *DB, srv *servers) (*Outcome, error) {
	cfg := r.cfg
	c, err := newClient(srv.URLs(), 256, srv.secret)
	if err != nil {
		return nil, err
	}
	defer c.close()
	since, err := db.Now(ctx)
	if err != nil {
		return nil, err
	}
	u0, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	self0, _ := procCPU(os.Getpid())
	n := int(cfg.Rate * cfg.Duration.Seconds())
	var created atomic.Int64
	var lat latencies
	var errs errorLog
	timeoutS := int64(cfg.PaymentTimeout / time.Second)
	r.progress("%d orders at %.0f/s, %d%% paid, payment timeout %s", n, cfg.Rate, cfg.PaidPercent, cfg.PaymentTimeout)
	started, sendS := Pace(ctx, n, cfg.Rate, 256, cfg.Duration+30*time.Second, func(ctx context.Context, i int) {
		t := time.Now()
		o, err := c.createOrder(ctx, fmt.Sprintf("user-%d", i), SKU(i), timeoutS)
		lat.add(time.Since(t))
		if err != nil {
			errs.add(err)
			return
		}
		created.Add(1)
		if i%100 < cfg.PaidPercent {
			// An overloaded server may answer the create after the payment deadline: the
			// order is then not payable and closes like an unpaid one.
			var ae *apiError
			if err := c.pay(ctx, o, i); err != nil && (!errors.As(err, &ae) || ae.code() != "order-not-payable") {
				errs.add(err)
			}
		}
	})
	self1, _ := procCPU(os.Getpid())
	r.progress("sent %d creates in %.1f s (load generator CPU %.1f s); waiting for the closes", started, sendS, self1-self0)
	left, err := db.WaitClosed(ctx, since, cfg.PaymentTimeout+60*time.Second)
	if err != nil {
		return nil, err
	}
	u1, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	cl, err := db.ReadCloses(ctx, since)
	if err != nil {
		return nil, err
	}
	res := &Result{Orders: created.Load(), EarlyCloses: Ptr(cl.Early), LatenessMS: cl.Lateness,
		CreateP99MS: Ptr(lat.p99()), CPUS: Ptr(round1(u1.CPUSeconds - u0.CPUSeconds)), PeakRSSMB: Ptr(round1(u1.PeakRSSMB))}
	if n := errs.overload(); n > 0 {
		res.OverloadedRequests = Ptr(n)
		r.progress("%d requests timed out or were shed (503): the server did not take %.0f/s", n, cfg.Rate)
	}
	if sendS > 0 {
		res.CreatedPerS = Ptr(round1(float64(created.Load()) / sendS))
	}
	out := &Outcome{Result: res}
	if cl.Early > 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders closed before close_at", cl.Early))
	}
	if left != 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders still open a minute after the last deadline", left))
	}
	return out, nil
}

// steady: orders over HTTP at a fixed rate; lateness, create latency, CPU and RSS.
func (r *runner) steady(ctx context.Context) (*Outcome, error) {
	return r.steadyOn(ctx, nil)
}

// steadyOn runs steady on a new database that load (when set) fills before the server
// starts.
func (r *runner) steadyOn(ctx context.Context, load func(ctx context.Context, db *DB) error) (*Outcome, error) {
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := db.SeedStock(ctx); err != nil {
		return nil, err
	}
	if load != nil {
		if err := load(ctx, db); err != nil {
			return nil, err
		}
		if err := db.Analyze(ctx); err != nil {
			return nil, err
		}
	}
	srv, err := r.start(ctx, db, 1)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	return r.steadyRun(ctx, db, srv)
}

// burst: Burst orders with reservations and coupons, all due in the same millisecond.
func (r *runner) burst(ctx context.Context) (*Outcome, error) {
	cfg := r.cfg
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	now, err := db.Now(ctx)
	if err != nil {
		return nil, err
	}
	r.progress("loading %d open orders with reservations and coupons", cfg.Burst)
	if err := db.SeedStock(ctx); err != nil {
		return nil, err
	}
	if _, err := db.SeedOrders(ctx, SeedOrders{N: cfg.Burst, State: "pending_payment", CreatedAt: now, CloseAt: now + 3_600_000, Coupons: true}); err != nil {
		return nil, err
	}
	if now, err = db.Now(ctx); err != nil {
		return nil, err
	}
	due := now + cfg.BurstLead.Milliseconds()
	if err := db.MoveDeadlines(ctx, due); err != nil {
		return nil, err
	}
	if err := db.Analyze(ctx); err != nil {
		return nil, err
	}
	srv, err := r.start(ctx, db, 1)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	u0, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	if now, err = db.Now(ctx); err != nil {
		return nil, err
	}
	if now >= due {
		return nil, fmt.Errorf("the server was ready %d ms after the burst's deadline: raise --burst-lead", now-due)
	}
	w0, measured, err := db.work(ctx)
	if err != nil {
		return nil, err
	}
	r.progress("server ready %d ms before the deadline; waiting for %d closes", due-now, cfg.Burst)
	left, err := db.WaitClosed(ctx, 0, time.Duration(due-now)*time.Millisecond+5*time.Minute)
	if err != nil {
		return nil, err
	}
	out, err := r.burstResult(ctx, db, srv, u0, due, left)
	if err != nil || !measured {
		return out, err
	}
	// The relay marks the last messages delivered after the last close. A backend that
	// flushed its statistics less than a second before going idle keeps the rest pending
	// for up to 10 s (PostgreSQL 15's PGSTAT_IDLE_INTERVAL; CI read 3.1 writes a close
	// 1.5 s after the work): stop the server, whose backends flush as they exit, and read
	// once the counts settle.
	if err := db.WaitDelivered(ctx, time.Minute); err != nil {
		return nil, err
	}
	srv.Stop()
	w1, err := db.settledWork(ctx, 15*time.Second)
	if err != nil {
		return nil, err
	}
	if n := float64(out.Result.Orders); n > 0 {
		out.Result.DBRowWritesPerClose = Ptr(round1(float64(w1.rowWrites-w0.rowWrites) / n))
		out.Result.DBWALBytesPerClose = Ptr(round1(float64(w1.walBytes-w0.walBytes) / n))
	}
	return out, nil
}

func (r *runner) burstResult(ctx context.Context, db *DB, srv *servers, u0 usage, due, left int64) (*Outcome, error) {
	u1, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	out, err := BurstOutcome(ctx, db, due, left)
	if err != nil {
		return nil, err
	}
	out.Result.CPUS = Ptr(round1(u1.CPUSeconds - u0.CPUSeconds))
	out.Result.PeakRSSMB = Ptr(round1(u1.PeakRSSMB))
	return out, nil
}

// BurstOutcome measures a burst whose orders were all due at due (unix ms) once nothing
// is left open (left is what the wait left): closes/s and total seconds from the deadline
// to the last close, early closes, and whether every release was applied.
func BurstOutcome(ctx context.Context, db *DB, due, left int64) (*Outcome, error) {
	cl, err := db.ReadCloses(ctx, 0)
	if err != nil {
		return nil, err
	}
	held, frozen, err := db.Effects(ctx)
	if err != nil {
		return nil, err
	}
	broken, err := db.ConservationBroken(ctx)
	if err != nil {
		return nil, err
	}
	total := float64(max(cl.LastClosedAt-due, 1)) / 1000
	res := &Result{Orders: cl.Closed, EarlyCloses: Ptr(cl.Early), LatenessMS: cl.Lateness,
		ClosesPerS: Ptr(round1(float64(cl.Closed) / total)), TotalS: Ptr(total)}
	out := &Outcome{Result: res}
	if cl.Early > 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders closed before close_at", cl.Early))
	}
	if left != 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d due orders still open at the end of the wait", left))
	}
	if held != 0 || frozen != 0 || broken != 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("closed orders with %d reservations held and %d coupons frozen; %d SKUs off their reservations", held, frozen, broken))
	}
	return out, nil
}

// flashSale: one SKU with FlashStock units, FlashBuyers buyers as fast as Workers go.
func (r *runner) flashSale(ctx context.Context) (*Outcome, error) {
	cfg := r.cfg
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	srv, err := r.start(ctx, db, 1)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	c, err := newClient(srv.URLs(), cfg.Workers, srv.secret)
	if err != nil {
		return nil, err
	}
	defer c.close()
	const sku = "flash"
	if err := c.setStock(ctx, sku, int64(cfg.FlashStock)); err != nil {
		return nil, err
	}
	u0, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	var created, lastCreated atomic.Int64
	var lat latencies
	var errs errorLog
	r.progress("%d buyers for %d units, %d in flight", cfg.FlashBuyers, cfg.FlashStock, cfg.Workers)
	start := time.Now()
	Pace(ctx, cfg.FlashBuyers, 0, cfg.Workers, 10*time.Minute, func(ctx context.Context, i int) {
		t := time.Now()
		_, err := c.createOrder(ctx, fmt.Sprintf("buyer-%d", i), sku, 0)
		lat.add(time.Since(t))
		var ae *apiError
		switch {
		case err == nil:
			created.Add(1)
			lastCreated.Store(int64(time.Since(start)))
		case errors.As(err, &ae) && ae.code() == "out-of-stock":
		default:
			errs.add(err)
		}
	})
	if err := errs.err(); err != nil {
		return nil, err
	}
	u1, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	avail, held, sold, err := db.StockOf(ctx, sku)
	if err != nil {
		return nil, err
	}
	broken, err := db.ConservationBroken(ctx)
	if err != nil {
		return nil, err
	}
	n := created.Load()
	res := &Result{Orders: n, CreatedPerS: Ptr(round1(float64(n) / max(time.Duration(lastCreated.Load()).Seconds(), 1e-3))),
		CreateP99MS: Ptr(lat.p99()), CPUS: Ptr(round1(u1.CPUSeconds - u0.CPUSeconds)), PeakRSSMB: Ptr(round1(u1.PeakRSSMB))}
	out := &Outcome{Result: res}
	want := int64(min(cfg.FlashStock, cfg.FlashBuyers))
	if n != want || held != n || avail != int64(cfg.FlashStock)-n || sold != 0 || broken != 0 {
		out.Violations = append(out.Violations, fmt.Sprintf("%d orders created for %d units (want %d); stock available %d held %d sold %d; %d SKUs off their reservations",
			n, cfg.FlashStock, want, avail, held, sold, broken))
	}
	return out, nil
}

// history: steady against HistoryOrders closed orders, next to steady on an empty database.
func (r *runner) history(ctx context.Context) (*Outcome, error) {
	r.progress("steady on an empty database")
	base, err := r.steadyOn(ctx, nil)
	if err != nil {
		return nil, err
	}
	r.progress("loading %d closed orders", r.cfg.HistoryOrders)
	out, err := r.steadyOn(ctx, func(ctx context.Context, db *DB) error {
		now, err := db.Now(ctx)
		if err != nil {
			return err
		}
		t := time.Now()
		_, err = db.SeedOrders(ctx, SeedOrders{N: r.cfg.HistoryOrders, State: "closed", CreatedAt: now - 30*24*3_600_000,
			CloseAt: now - 3_600_000, Transitions: true, Seed: 1})
		r.progress("loaded in %.1f s", time.Since(t).Seconds())
		return err
	})
	if err != nil {
		return nil, err
	}
	return withBaseline(out, base, fmt.Sprintf("orderly, empty database (history: %d closed orders)", r.cfg.HistoryOrders)), nil
}

// pending: server RSS with PendingOrders open orders against PendingBaseline.
func (r *runner) pending(ctx context.Context) (*Outcome, error) {
	load := func(n int) func(ctx context.Context, db *DB) error {
		return func(ctx context.Context, db *DB) error {
			now, err := db.Now(ctx)
			if err != nil {
				return err
			}
			r.progress("loading %d open orders due in 2 h", n)
			_, err = db.SeedOrders(ctx, SeedOrders{N: n, State: "pending_payment", CreatedAt: now, CloseAt: now + 2*3_600_000, Seed: 2})
			return err
		}
	}
	base, err := r.steadyOn(ctx, load(r.cfg.PendingBaseline))
	if err != nil {
		return nil, err
	}
	out, err := r.steadyOn(ctx, load(r.cfg.PendingOrders))
	if err != nil {
		return nil, err
	}
	out.Result.Orders = int64(r.cfg.PendingOrders)
	base.Result.Orders = int64(r.cfg.PendingBaseline)
	return withBaseline(out, base, fmt.Sprintf("orderly, %d pending", r.cfg.PendingBaseline)), nil
}

// withBaseline puts the reference run of a scenario among out's peers.
func withBaseline(out, base *Outcome, name string) *Outcome {
	base.Result.Name = name
	out.Result.Peers = append(out.Result.Peers, base.Result)
	for _, v := range base.Violations {
		out.Violations = append(out.Violations, name+": "+v)
	}
	return out
}

// notify: creates/s over Instances instances, each create the new earliest deadline (a
// cross-instance wake-up each), next to creates whose deadlines come in creation order.
func (r *runner) notify(ctx context.Context) (*Outcome, error) {
	earliest, err := r.notifyRun(ctx, true)
	if err != nil {
		return nil, err
	}
	later, err := r.notifyRun(ctx, false)
	if err != nil {
		return nil, err
	}
	return withBaseline(earliest, later, "orderly, deadlines in creation order"), nil
}

// maxTimeoutSeconds is the longest payment timeout the API takes (168 h).
const maxTimeoutSeconds = 168 * 3600

func (r *runner) notifyRun(ctx context.Context, earliest bool) (*Outcome, error) {
	cfg := r.cfg
	n := min(cfg.NotifyOrders, maxTimeoutSeconds-1)
	instances := cfg.Instances
	if cfg.DatabaseURL == "" {
		instances = 1
	}
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := db.SeedStock(ctx); err != nil {
		return nil, err
	}
	srv, err := r.start(ctx, db, instances)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	c, err := newClient(srv.URLs(), cfg.Workers, srv.secret)
	if err != nil {
		return nil, err
	}
	defer c.close()
	u0, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	var created atomic.Int64
	var lat latencies
	var errs errorLog
	r.progress("%d creates over %d instances, earliest deadline each: %v", n, instances, earliest)
	_, sendS := Pace(ctx, n, 0, cfg.Workers, 10*time.Minute, func(ctx context.Context, i int) {
		// At more than one create a second, a deadline one second shorter than the
		// previous create's is earlier than every deadline before it.
		timeout := int64(maxTimeoutSeconds - i)
		if !earliest {
			timeout = int64(maxTimeoutSeconds - n)
		}
		t := time.Now()
		_, err := c.createOrder(ctx, fmt.Sprintf("user-%d", i), SKU(i), timeout)
		lat.add(time.Since(t))
		if err != nil {
			errs.add(err)
			return
		}
		created.Add(1)
	})
	if err := errs.err(); err != nil {
		return nil, err
	}
	u1, err := srv.Usage()
	if err != nil {
		return nil, err
	}
	res := &Result{Orders: created.Load(), CreatedPerS: Ptr(round1(float64(created.Load()) / max(sendS, 1e-3))),
		CreateP99MS: Ptr(lat.p99()), CPUS: Ptr(round1(u1.CPUSeconds - u0.CPUSeconds)), PeakRSSMB: Ptr(round1(u1.PeakRSSMB))}
	return &Outcome{Result: res}, nil
}
