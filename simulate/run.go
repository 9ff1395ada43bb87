package simulate

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly/channel/sim"
)

// Run seeds the catalogue, sends the orders and plays their buyers against cfg.Targets,
// waits for everything to settle and checks the invariants (see the package doc).
//
// Violations are not errors: they are in the Result. Run returns an error for an invalid
// Config, when seeding fails (the server is unreachable or refuses the catalogue) and when
// Config.Store cannot be read. When ctx is cancelled, Run stops every loop and waits for
// its goroutines; after seeding it returns the result of what it saw so far together with
// ctx's error, during seeding only ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	defer r.close()
	return r.run(ctx)
}

// runner is one run: what every flow shares. Each flow's traffic is driven by its
// FlowDriver (flow.go), e.g. standardFlow (standard.go).
type runner struct {
	cfg     Config
	c       *client
	own     *http.Transport // the transport Run created, closed at the end; nil if given
	prefix  string          // makes SKU and user names unique to the run
	timeout time.Duration   // the payment timeout the server is asked for
	drivers []FlowDriver    // one per Config.Flows, in that order
	names   []string        // their names

	initialMu sync.Mutex
	initial   map[string]int64 // SKU → available+held+sold after seeding, every flow's

	begin, sendStart time.Time
	lastCreated      atomic.Int64 // unix ns of the latest answer to an order request

	phase       atomic.Pointer[string]
	ledgerOnce  sync.Once
	ledgerByKey map[string][]sim.GatewayCall // refund calls by idempotency key
	// refundIDs are the ids of every flow's merchant refunds, read once after settling.
	refundIDsOnce sync.Once
	refundIDs     map[string]bool

	// clock is the server's clock offset, measured after seeding; margin is its
	// ClockOffset.margin(), how far a judgement of a deadline is excused either way.
	clock  ClockOffset
	margin time.Duration

	mu           sync.Mutex
	httpProblems []string // unexpected answers outside an actor's script
	httpDropped  int      // beyond maxHTTPProblems
	refusals     []string // refusals no plan explains (capped like httpProblems)
	refusalsLeft int      // beyond maxHTTPProblems
}

const maxHTTPProblems = 50

func newRunner(cfg Config) *runner {
	r := &runner{
		cfg:     cfg,
		prefix:  "sim-" + strconv.FormatInt(time.Now().UnixMilli(), 36),
		timeout: time.Duration(cfg.timeoutSeconds()) * time.Second,
		initial: map[string]int64{},
	}
	hc := cfg.HTTPClient
	if hc == nil {
		r.own = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        2 * cfg.Concurrency,
			MaxIdleConnsPerHost: 2 * cfg.Concurrency,
			IdleConnTimeout:     30 * time.Second,
		}
		hc = &http.Client{Transport: r.own, Timeout: 30 * time.Second}
	}
	r.c = newClient(cfg.Targets, hc, cfg.Concurrency, cfg.CallbackSecret, cfg.RetryFor)
	r.c.apiKey = cfg.APIKey
	r.c.provider = cfg.Provider
	for i, name := range cfg.Flows {
		d := newDriver(name) // withDefaults checked the names
		d.Plan(r, shareOf(cfg.Orders, len(cfg.Flows), i))
		r.drivers, r.names = append(r.drivers, d), append(r.names, name)
	}
	seed := PhaseSeed
	r.phase.Store(&seed)
	return r
}

// rate returns the send pace of a flow that sends orders of the run's Config.Orders
// requests: its share of Config.Rate.
func (r *runner) rate(orders int) float64 {
	if r.cfg.Orders == 0 {
		return r.cfg.Rate
	}
	return r.cfg.Rate * float64(orders) / float64(r.cfg.Orders)
}

// stocked records the units of a SKU a driver stocked (available + held + sold read back
// after seeding), for the database check.
func (r *runner) stocked(sku string, units int64) {
	r.initialMu.Lock()
	defer r.initialMu.Unlock()
	r.initial[sku] = units
}

// answered records that an order request got its answer now: the send window ends with
// the latest.
func (r *runner) answered() {
	for now := time.Now().UnixNano(); ; {
		last := r.lastCreated.Load()
		if now <= last || r.lastCreated.CompareAndSwap(last, now) {
			return
		}
	}
}

func (r *runner) close() {
	if r.own != nil {
		r.own.CloseIdleConnections()
	}
}

// setPhase enters phase p and tells Config.OnPhase.
func (r *runner) setPhase(p string) {
	r.phase.Store(&p)
	if r.cfg.OnPhase != nil {
		r.cfg.OnPhase(p)
	}
}

// httpProblem records an unexpected answer outside a buyer's script.
func (r *runner) httpProblem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.httpProblems) >= maxHTTPProblems {
		r.httpDropped++
		return
	}
	r.httpProblems = append(r.httpProblems, "HTTP: "+fmt.Sprintf(format, args...))
}

// wrongRefusal records an order refused for a reason the plan does not explain.
func (r *runner) wrongRefusal(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refusals) >= maxHTTPProblems {
		r.refusalsLeft++
		return
	}
	r.refusals = append(r.refusals, "refused: "+fmt.Sprintf(format, args...))
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	r.begin = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.setPhase(PhaseSeed)
	if r.cfg.Progress != nil {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { r.progress(done) })
		defer func() { close(done); wg.Wait() }()
	}
	var health sync.WaitGroup
	health.Go(func() { r.c.watchHealth(ctx) }) // health.go; ends with ctx
	defer health.Wait()
	defer cancel() // before health.Wait
	if err := r.seed(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("simulate: seed: %w", err)
	}
	r.clock = r.measureClock(ctx)
	r.margin = r.clock.margin()
	r.setPhase(PhaseSend)
	r.send(ctx)
	r.setPhase(PhaseSettle)
	r.settle(ctx)
	res := r.evaluate()
	if r.cfg.Store != nil && ctx.Err() == nil {
		r.setPhase(PhaseVerify)
		if err := r.verify(ctx, res); err != nil {
			return res, err
		}
	}
	res.DurationS = time.Since(r.begin).Seconds()
	return res, ctx.Err()
}

// progress prints one line per second until done is closed.
func (r *runner) progress(done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		line := fmt.Sprintf("%6.1fs %-6s", time.Since(r.begin).Seconds(), *r.phase.Load())
		for i, d := range r.drivers {
			if len(r.drivers) > 1 {
				line += " " + r.names[i] + ":"
			}
			line += " " + d.Progress()
		}
		fmt.Fprintln(r.cfg.Progress, line)
	}
}

// seed has every driver create what its traffic needs, one after the other.
func (r *runner) seed(ctx context.Context) error {
	for i, d := range r.drivers {
		if err := d.Seed(ctx, r); err != nil {
			if len(r.drivers) > 1 {
				return fmt.Errorf("%s flow: %w", r.names[i], err)
			}
			return err
		}
	}
	return nil
}

// send starts every driver's traffic at once and returns when all are done (or ctx is
// cancelled and they all stopped).
func (r *runner) send(ctx context.Context) {
	r.sendStart = time.Now()
	r.lastCreated.Store(r.sendStart.UnixNano())
	var wg sync.WaitGroup
	for _, d := range r.drivers {
		wg.Go(func() { d.Drive(ctx, r) })
	}
	wg.Wait()
}

// sleepUntil waits until t or ctx's end, whichever comes first, and returns ctx's error.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// forEach calls fn(ctx, i) for i in [0, n) on at most workers goroutines. The first error
// stops the others and is returned; so is ctx's error.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(max(workers, 1), n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || inner.Err() != nil {
					return
				}
				if err := fn(inner, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
