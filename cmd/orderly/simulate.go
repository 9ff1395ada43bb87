package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/channel/stripe"
	"github.com/orderlyhq/orderly/channel/stripe/stripetest"
	"github.com/orderlyhq/orderly/channel/wechatpay"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/fault"
	"github.com/orderlyhq/orderly/internal/redact"
	"github.com/orderlyhq/orderly/simulate"
	"github.com/orderlyhq/orderly/simulate/cluster"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

// Defaults of `simulate` that differ from serve's.
const (
	simSweepInterval = 2 * time.Second
	// killDrain is the Drain of a run with --kill-every: an instance killed right after it
	// claimed outbox messages leaves them leased (30 s, outbox.Config.Lease) before another
	// instance delivers them, which must fit before the run gives up settling.
	killDrain = time.Minute
)

func simulateCommand() *cli.Command {
	return &cli.Command{
		Name:  "simulate",
		Usage: "drive realistic traffic against a server and check every invariant",
		Description: "Without --target and --database-url, starts an in-process server on a temporary SQLite database.\n" +
			"simulate writes test orders into the database it runs on: it never reads ORDERLY_DATABASE_URL, and refuses a\n" +
			"--database-url that already holds orders unless --allow-existing-data is given.\n" +
			"With --database-url (or --instances, --kill-every), starts --instances child processes (serve with the saga fault rates)\n" +
			"on that database (PostgreSQL or MySQL for more than one; default: one on a temporary SQLite file),\n" +
			"spreads the traffic over them and, with --kill-every, SIGKILLs and restarts one now and then.\n" +
			"Exits 1 when an invariant is violated or an order closed early.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "target", Usage: "base URL of a running server (default: start one in process)", Sources: env("target")},
			&cli.StringFlag{Name: "callback-secret", Usage: "the target's callback secret (required with --target)", Sources: env("callback-secret")},
			&cli.StringFlag{Name: "api-key", Usage: "bearer token sent with every request to --target: its admin token or an API key of scopes buyer and merchant", Sources: env("api-key")},
			// No ORDERLY_DATABASE_URL here: that variable names serve's database, which is not
			// where test traffic belongs.
			&cli.StringFlag{Name: "database-url", Usage: "the target's database, to run the database checks too (optional with --target); without --target, the database of the child instances, which must hold no orders (see --allow-existing-data); never read from ORDERLY_DATABASE_URL"},
			&cli.BoolFlag{Name: "allow-existing-data", Usage: "run on a --database-url that already holds orders (simulate adds test orders, stock and coupons to it)"},
			&cli.IntFlag{Name: "orders", Value: simulate.DefaultOrders, Usage: "number of orders"},
			&cli.FloatFlag{Name: "rate", Value: 200, Usage: "orders per second"},
			&cli.DurationFlag{Name: "payment-timeout", Value: simulate.DefaultPaymentTimeout, Usage: "each order's time to pay (whole seconds)"},
			&cli.Int64Flag{Name: "seed", Value: 1, Usage: "seed of the traffic plan (and of the choice of instances to kill)"},
			&cli.IntFlag{Name: "concurrency", Value: simulate.DefaultConcurrency, Usage: "HTTP requests in flight"},
			&cli.BoolFlag{Name: "json", Usage: "print only the JSON result on stdout"},
			&cli.IntFlag{Name: "instances", Value: 1, Usage: "number of serve child processes (instances) on --database-url; more than 1 needs PostgreSQL or MySQL"},
			&cli.DurationFlag{Name: "kill-every", Usage: "SIGKILL a random instance this often while orders are due, and start it again on the same port (0: never)"},
			&cli.DurationFlag{Name: "sweep-interval", Value: simSweepInterval, Usage: "period of the servers' sweep (serve --sweep-interval)"},
			&cli.StringFlag{Name: "timer", Usage: "given to the instances as serve --timer"},
			&cli.StringFlag{Name: "redis-url", Usage: "given to the instances as serve --redis-url"},
			&cli.StringFlag{Name: "nats-url", Usage: "given to the instances as serve --nats-url"},
			&cli.DurationFlag{Name: "max-lateness", Usage: "a close later than this after close_at is a violation (0: no bound); " +
				"with --sweep-interval far away it bounds what the precise timer does, so a dead timer fails the run"},
			&cli.StringFlag{Name: "gateway", Value: "sim", Usage: "the payment provider: sim (orderly callbacks), or stripe, alipay or wechat (an imitation of that provider's API in process, its signed notifications; in-process server only)"},
			&cli.StringFlag{Name: "flow", Value: "standard", Usage: "the traffic: standard, group_buy (deals and groups), wallet (wallet checkouts, sagas), ride_hailing (trips: card holds, sagas) or mixed (standard, group_buy and wallet at once)"},
			&cli.DurationFlag{Name: "group-time-limit", Value: simulate.DefaultGroupTimeLimit, Usage: "shortest group time limit of the group_buy deals (whole seconds, at least 2)"},
			&cli.FloatFlag{Name: "min-created-share", Usage: "least share (0–1) of the orders sent that must be created (0: no minimum)"},
			&cli.FloatFlag{Name: "min-paid-share", Value: simulate.DefaultMinPaidShare, Usage: "least share (0–1) of the buyers who meant to pay in time whose order must end paid, else the run barely tested payments (0: no minimum)"},
		}, append(sagaFaultFlags(), faultFlags()...)...),
		Action:   runSimulate,
		Commands: []*cli.Command{instanceCommand()},
	}
}

// sagaFaultFlags are the saga fault rates of simulate and of its instances (internal/fault.Saga).
func sagaFaultFlags() []cli.Flag {
	return []cli.Flag{
		&cli.FloatFlag{Name: "fail-rate", Usage: "share (0–1) of saga participant calls that fail transiently before running"},
		&cli.FloatFlag{Name: "slow-rate", Usage: "share (0–1) of saga participant calls delayed 20 ms"},
		&cli.FloatFlag{Name: "timeout-after-apply-rate", Usage: "share (0–1) of saga participant calls that run and then report a timeout"},
	}
}

// instanceCommand is `orderly simulate instance`, what simulate's child instances run:
// serve with the test kit's saga faults at the rates of sagaFaultFlags, whose count it logs
// when it stops. Hidden: serve has no test switch.
func instanceCommand() *cli.Command {
	f := &fault.Saga{}
	cmd := serveCommand(func(c *cli.Command, cfg *engine.Config) error {
		f.FailRate, f.SlowRate, f.TimeoutAfterApplyRate = c.Float("fail-rate"), c.Float("slow-rate"), c.Float("timeout-after-apply-rate")
		if f.Enabled() {
			cfg.Wrap.Participant = f.Wrap
		}
		return f.Validate()
	})
	cmd.Name, cmd.Hidden, cmd.Usage = "instance", true, "serve with saga faults injected (simulate's child instances)"
	cmd.Flags = append(cmd.Flags, sagaFaultFlags()...)
	serve := cmd.Action
	cmd.Action = func(ctx context.Context, c *cli.Command) error {
		err := serve(ctx, c)
		if logger, lerr := newLogger(c.Root(), c.Root().ErrWriter); lerr == nil && f.Enabled() {
			logger.Info("saga faults injected", "count", f.Injected())
		}
		return err
	}
	return cmd
}

// passThrough returns the serve flags given to simulate for its instances, those set only.
func passThrough(cmd *cli.Command) []string {
	var args []string
	for _, name := range []string{"timer", "redis-url", "nats-url"} {
		if v := cmd.String(name); v != "" {
			args = append(args, "--"+name, v)
		}
	}
	return args
}

// sagaFaultArgs are the instance flags that give the run's saga fault rates.
func sagaFaultArgs(cfg simulate.Config) []string {
	var args []string
	for _, f := range []struct {
		name string
		rate float64
	}{{"fail-rate", cfg.FailRate}, {"slow-rate", cfg.SlowRate}, {"timeout-after-apply-rate", cfg.TimeoutAfterApplyRate}} {
		if f.rate > 0 {
			args = append(args, "--"+f.name, strconv.FormatFloat(f.rate, 'g', -1, 64))
		}
	}
	return args
}

// sharedDatabase reports whether a database URL names a server several instances can share.
func sharedDatabase(url string) bool {
	for _, p := range []string{"postgres://", "postgresql://", "mysql://"} {
		if strings.HasPrefix(url, p) {
			return true
		}
	}
	return false
}

func runSimulate(ctx context.Context, cmd *cli.Command) error {
	root := cmd.Root()
	cfg := simulate.Config{
		Target: cmd.String("target"), CallbackSecret: []byte(cmd.String("callback-secret")), APIKey: cmd.String("api-key"),
		Orders: cmd.Int("orders"), Rate: cmd.Float("rate"), PaymentTimeout: cmd.Duration("payment-timeout"),
		Seed: cmd.Int64("seed"), Concurrency: cmd.Int("concurrency"),
		MaxLateness: cmd.Duration("max-lateness"), MinCreatedShare: cmd.Float("min-created-share"), MinPaidShare: cmd.Float("min-paid-share"),
		FailRate: cmd.Float("fail-rate"), SlowRate: cmd.Float("slow-rate"), TimeoutAfterApplyRate: cmd.Float("timeout-after-apply-rate"),
	}
	flows, err := simulate.ParseFlows(cmd.String("flow"))
	if err != nil {
		return cli.Exit("--flow: "+err.Error(), 2)
	}
	cfg.Flows, cfg.GroupTimeLimit = flows, cmd.Duration("group-time-limit")
	cfg.VerifyFlows = features.Flows()
	if !cmd.Bool("json") && isTerminal(root.ErrWriter) {
		cfg.Progress = root.ErrWriter
	}
	dbURL, instances, killEvery, extra := cmd.String("database-url"), cmd.Int("instances"), cmd.Duration("kill-every"), passThrough(cmd)
	switch {
	case cmd.IsSet("orders") && cfg.Orders <= 0:
		return cli.Exit(fmt.Sprintf("--orders must be at least 1, got %d", cfg.Orders), 2)
	case cmd.IsSet("rate") && cfg.Rate <= 0:
		return cli.Exit(fmt.Sprintf("--rate must be positive, got %g", cfg.Rate), 2)
	case positiveFlags(cmd, "payment-timeout") != nil:
		return cli.Exit(positiveFlags(cmd, "payment-timeout").Error(), 2)
	case instances < 1:
		return cli.Exit("--instances must be at least 1", 2)
	case !rate01(cfg.FailRate) || !rate01(cfg.SlowRate) || !rate01(cfg.TimeoutAfterApplyRate):
		return cli.Exit(fmt.Sprintf("--fail-rate, --slow-rate and --timeout-after-apply-rate must be 0 to 1, got %g, %g and %g",
			cfg.FailRate, cfg.SlowRate, cfg.TimeoutAfterApplyRate), 2)
	case killEvery < 0:
		return cli.Exit("--kill-every must not be negative", 2)
	case cfg.Target != "" && (instances > 1 || killEvery > 0 || len(extra) > 0 || cmd.String("faults") != ""):
		return cli.Exit("--instances, --kill-every, --timer, --redis-url, --nats-url and --faults are for the servers simulate starts; they do not go with --target", 2)
	case !slices.Contains([]string{"sim", "stripe", "alipay", "wechat"}, cmd.String("gateway")):
		return cli.Exit(fmt.Sprintf("--gateway must be sim, stripe, alipay or wechat, not %q", cmd.String("gateway")), 2)
	case cmd.String("gateway") != "sim" && (cfg.Target != "" || dbURL != "" || instances > 1 || killEvery > 0 || len(extra) > 0 || cmd.String("faults") != ""):
		return cli.Exit("--gateway stripe, alipay and wechat run against the server simulate starts in process (the imitation of the provider lives there); it does not go with --target, --database-url, --instances, --kill-every or --faults", 2)
	case cfg.Target != "":
		return simulateTarget(ctx, cmd, cfg)
	case instances > 1 && !sharedDatabase(dbURL) && !ownsDatabase(cmd):
		return cli.Exit("--instances above 1 needs --database-url postgres://… or mysql://… (SQLite is a single-machine store)", 2)
	case dbURL != "" || instances > 1 || killEvery > 0 || len(extra) > 0 || cmd.String("faults") != "":
		return simulateCluster(ctx, cmd, cfg)
	}
	return simulateInProcess(ctx, cmd, cfg)
}

// simulateInProcess runs against a server started in this process on a temporary SQLite
// database.
func simulateInProcess(ctx context.Context, cmd *cli.Command, cfg simulate.Config) error {
	root := cmd.Root()
	dir, err := os.MkdirTemp("", "orderly-simulate-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(root.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))
	secret := []byte(newSecret())
	faults := &fault.Saga{FailRate: cfg.FailRate, SlowRate: cfg.SlowRate, TimeoutAfterApplyRate: cfg.TimeoutAfterApplyRate}
	ecfg := engine.Config{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(dir, "orderly.db"), CallbackSecret: secret,
		SweepInterval: cmd.Duration("sweep-interval"), Logger: logger,
	}
	if faults.Enabled() {
		ecfg.Wrap.Participant = faults.Wrap
	}
	var fake *stripetest.Server
	switch cmd.String("gateway") {
	case "sim":
		g := sim.New()
		ecfg.Gateway, cfg.GatewayLedger = g, g.Ledger
	case "stripe":
		fake = stripetest.NewServer()
		defer fake.Close()
		ecfg.Channels = []channel.Adapter{stripe.New(stripe.Config{APIKey: stripetest.APIKey,
			WebhookSecrets: []string{stripetest.WebhookSecret}, BaseURL: fake.URL})}
		ecfg.DefaultChannel = "stripe"
		cfg.Provider = &simulate.StripeProvider{Fake: fake}
	case "alipay":
		srv := alipaytest.NewServer()
		defer srv.Close()
		acfg := srv.Config()
		acfg.Currency = "USD"
		a, err := alipay.New(acfg)
		if err != nil {
			return err
		}
		ecfg.Channels, ecfg.DefaultChannel, cfg.Provider = []channel.Adapter{a}, alipay.Name, srv
	case "wechat":
		srv := wechatpaytest.NewServer()
		defer srv.Close()
		wcfg := srv.Config()
		wcfg.Currency, wcfg.NotifyURL = "USD", "https://orderly.invalid/v1/channels/wechat/webhook"
		a, err := wechatpay.New(wcfg)
		if err != nil {
			return err
		}
		ecfg.Channels, ecfg.DefaultChannel, cfg.Provider = []channel.Adapter{a}, wechatpay.Name, wechatProvider{srv}
	}
	e, err := engine.Open(ctx, ecfg, features.All()...)
	if err != nil {
		return err
	}
	defer e.Close(context.WithoutCancel(ctx))
	if err := e.Start(ctx); err != nil {
		return err
	}
	cfg.Target, cfg.CallbackSecret, cfg.Store = e.URL(), secret, e.Store()
	if fake != nil {
		fake.SetWebhook(e.URL() + "/v1/channels/stripe/webhook")
	}
	res, err := simulate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	res.Gateway, res.SagaFaults = cmd.String("gateway"), faults.Injected()
	return report(cmd, res, nil)
}

// simulateTarget runs against a server someone else started.
func simulateTarget(ctx context.Context, cmd *cli.Command, cfg simulate.Config) error {
	if len(cfg.CallbackSecret) == 0 {
		return cli.Exit("--callback-secret is required with --target", 2)
	}
	if url := cmd.String("database-url"); url != "" {
		db, err := sqlstore.Open(ctx, sqlstore.Config{URL: url, SkipMigrate: true})
		if err != nil {
			return err
		}
		defer db.Close()
		cfg.Store = db
	}
	res, err := simulate.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return report(cmd, res, nil)
}

// checkSimulationDatabase refuses (exit status 2) a database that already holds orders,
// unless allowed: simulate's traffic would mix with them, and stay.
func checkSimulationDatabase(ctx context.Context, url string, allow bool) error {
	n, err := sqlstore.CountOrders(ctx, url)
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if n > 0 && !allow {
		return cli.Exit(fmt.Sprintf("simulate: the database %s already holds %d orders, and simulate would add its test orders, "+
			"stock and coupons to them; give it an empty database (or no --database-url: a temporary SQLite file), "+
			"or --allow-existing-data", redact.URL(url), n), exitUsage)
	}
	return nil
}

// clusterRun is what a run on child instances adds to the result.
type clusterRun struct {
	instances int
	kills     int
	killEvery time.Duration
	logs      []string
	faults    []cluster.FaultRecord
}

// clusterReport is the JSON result of a run on child instances: the Result's members,
// then instances and kills.
type clusterReport struct {
	*simulate.Result
	Instances int `json:"instances"`
	Kills     int `json:"kills"`
	// Faults are the faults injected (--faults), in order.
	Faults []cluster.FaultRecord `json:"faults,omitempty"`
}

// simulateCluster starts --instances `orderly serve` child processes on --database-url (a
// temporary SQLite file when it is empty), runs against all of them, SIGKILLs one every
// --kill-every from the first order until the last deadline, checks the database at the
// end, and stops them all.
func simulateCluster(ctx context.Context, cmd *cli.Command, cfg simulate.Config) error {
	root := cmd.Root()
	if len(cfg.CallbackSecret) == 0 {
		cfg.CallbackSecret = []byte(newSecret())
	}
	env, dbURL, own, err := cluster.PrepareFaults(ctx, cluster.FaultConfig{
		Faults: cmd.String("faults"), Every: cmd.Duration("fault-every"), Instances: cmd.Int("instances"),
		SweepInterval: cmd.Duration("sweep-interval"), DatabaseURL: cmd.String("database-url"),
		Timer: cmd.String("timer"), RedisURL: cmd.String("redis-url"), NATSURL: cmd.String("nats-url"),
	})
	var refused *cluster.ConfigError
	if errors.As(err, &refused) {
		return cli.Exit(refused.Error(), exitUsage)
	}
	if err != nil {
		return err
	}
	defer env.Close()
	if cmd.String("database-url") != "" {
		if err := checkSimulationDatabase(ctx, dbURL, cmd.Bool("allow-existing-data")); err != nil {
			return err
		}
	} else if dbURL == "" {
		dir, err := os.MkdirTemp("", "orderly-simulate-db-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbURL = filepath.Join(dir, "orderly.db")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("simulate: find the orderly binary: %w", err)
	}
	logDir, err := os.MkdirTemp("", "orderly-simulate-logs-*")
	if err != nil {
		return err
	}
	run := &clusterRun{instances: cmd.Int("instances"), killEvery: cmd.Duration("kill-every")}
	cl, err := cluster.Start(ctx, cluster.Config{
		Binary: exe, Instances: run.instances, DatabaseURL: dbURL, CallbackSecret: string(cfg.CallbackSecret),
		SweepInterval: cmd.Duration("sweep-interval"), Extra: append(env.Overrides(passThrough(cmd), own), sagaFaultArgs(cfg)...), LogDir: logDir,
	})
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	defer cl.Stop()
	run.logs = cl.LogPaths()
	if cmd.Bool("json") {
		fmt.Fprintf(root.ErrWriter, "orderly simulate: %d instances, logs in %s\n", run.instances, logDir)
	}
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: dbURL, SkipMigrate: true})
	if err != nil {
		return err
	}
	defer db.Close()
	cfg.Targets, cfg.Target, cfg.Store = cl.URLs(), "", db
	if slices.Contains(env.Kinds(), cluster.FaultSIGSTOP) && !cmd.IsSet("concurrency") {
		// Requests sent to an instance just stopped wait for it to resume (12 s) and keep
		// their slots meanwhile; the rest of the traffic needs slots of its own (see
		// sigstopConcurrency).
		cfg.Concurrency = max(cfg.Concurrency, cluster.SigstopConcurrency)
	}
	// Also with one instance: it may be killed and take a moment to come back.
	cfg.RetryFor = simulate.DefaultRetryFor

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg      sync.WaitGroup
		killErr error
		// faultErr is a fault that could not be undone (a service that did not come back).
		faultErr error
		stop     = make(chan struct{})
		once     sync.Once
		timer    *time.Timer
	)
	stopKills := func() { once.Do(func() { close(stop) }) }
	if run.killEvery > 0 || len(env.Kinds()) > 0 {
		cfg.Drain = killDrain
		// Orders are due until one payment timeout after the last was sent.
		due := time.Duration(math.Ceil(max(cfg.PaymentTimeout, time.Second).Seconds())) * time.Second
		// A seeded, reproducible choice of victims, not a secret.
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6b69_6c6c))      //nolint:gosec // "kill" as the stream
		faultRng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6661_756c)) //nolint:gosec // "faul" as the stream
		cfg.OnPhase = func(phase string) {
			switch phase {
			case simulate.PhaseSend:
				if run.killEvery > 0 {
					wg.Go(func() {
						if err := cl.KillLoop(runCtx, stop, run.killEvery, rng); err != nil {
							killErr = err
							cancel(err)
						}
					})
				}
				wg.Go(func() {
					if err := env.Loop(runCtx, stop, cl, faultRng); err != nil {
						faultErr = err
						cancel(err)
					}
				})
			case simulate.PhaseSettle:
				timer = time.AfterFunc(due, stopKills)
			case simulate.PhaseVerify:
				stopKills()
			}
		}
	}
	res, err := simulate.Run(runCtx, cfg)
	stopKills()
	if timer != nil {
		timer.Stop()
	}
	wg.Wait()
	run.faults = env.Records()
	if killErr != nil {
		return fmt.Errorf("simulate: %w", killErr)
	}
	if faultErr != nil {
		return fmt.Errorf("simulate: %w", faultErr)
	}
	if err != nil {
		return err
	}
	run.kills = cl.Kills()
	res.Gateway = "sim"
	for _, c := range cl.Crashes() {
		res.Violations = append(res.Violations, "crash: "+c)
	}
	return report(cmd, res, run)
}

// report prints the result (JSON or the summary) and turns violations into exit code 1.
func report(cmd *cli.Command, res *simulate.Result, run *clusterRun) error {
	out := cmd.Root().Writer
	switch {
	case cmd.Bool("json") && run == nil:
		if err := writeJSON(out, res); err != nil {
			return err
		}
	case cmd.Bool("json"):
		if err := writeJSON(out, &clusterReport{Result: res, Instances: run.instances, Kills: run.kills, Faults: run.faults}); err != nil {
			return err
		}
	default:
		fmt.Fprint(out, res.Summary())
		if run != nil {
			fmt.Fprintf(out, "  instances   %d `orderly serve` processes, %d killed with SIGKILL and restarted", run.instances, run.kills)
			if run.killEvery > 0 {
				fmt.Fprintf(out, " (one every %s while orders were due)", run.killEvery)
			}
			fmt.Fprintf(out, "\n  logs        %s\n", strings.Join(run.logs, "\n              "))
			writeFaults(out, run.faults)
		}
	}
	if len(res.Violations) > 0 || res.EarlyCloses > 0 {
		if run != nil {
			writeFailedRequests(cmd.Root().ErrWriter, run.logs, maxFailedRequests)
		}
		return cli.Exit(fmt.Sprintf("simulate: %d violations, %d early closes", len(res.Violations), res.EarlyCloses), 1)
	}
	return nil
}

// maxFailedRequests is how many failed requests of the instances' logs a run with
// violations prints (writeFailedRequests).
const maxFailedRequests = 20

// failedRequestMarker is the start of the log line of a request answered 500
// (httpapi.Server.writeError), in the text log format of `orderly serve`.
const failedRequestMarker = `level=ERROR msg="http request failed"`

// writeFailedRequests copies to w the first max lines of the instance logs at paths that
// record a request answered 500, each after its log's name: a violation seen by the
// client as "500 internal" is explained by the server's error, and a CI log keeps it
// after the temporary log directory is gone. Logs that cannot be read are named with
// their error.
func writeFailedRequests(w io.Writer, paths []string, max int) {
	n := 0
	for _, path := range paths {
		b, err := os.ReadFile(path) //nolint:gosec // the instance logs simulate itself created (cluster.LogPaths)
		if err != nil {
			fmt.Fprintf(w, "orderly simulate: %v\n", err)
			continue
		}
		for line := range strings.Lines(string(b)) {
			if !strings.Contains(line, failedRequestMarker) {
				continue
			}
			if n == max {
				fmt.Fprintf(w, "orderly simulate: more requests answered 500 in %s\n", strings.Join(paths, ", "))
				return
			}
			fmt.Fprintf(w, "%s: %s", filepath.Base(path), strings.TrimSuffix(line, "\n")+"\n")
			n++
		}
	}
}

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check invariants I1–I7 against a database at rest",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Value: "orderly.db", Usage: "SQLite file path (or sqlite:PATH), postgres://… or mysql://…", Sources: env("database-url")},
			&cli.DurationFlag{Name: "tolerance", Value: verify.DefaultTolerance, Usage: "how overdue an open order may be"},
			&cli.BoolFlag{Name: "require-drained", Usage: "treat pending outbox messages as violations"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := positiveFlags(cmd, "tolerance"); err != nil {
				return cli.Exit(err.Error()+"; 1ms is the strictest", 2)
			}
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: cmd.String("database-url"), SkipMigrate: true})
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := verify.Check(ctx, store.Store(db), verify.Options{
				Tolerance: cmd.Duration("tolerance"), RequireDrained: cmd.Bool("require-drained"),
				Flows: features.Flows(), Groups: verify.ReadGroups, Holds: sim.ReadHolds,
			})
			if err != nil {
				return err
			}
			out := cmd.Root().Writer
			if cmd.Bool("json") {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				writeVerifyReport(out, rep)
				for _, v := range rep.Violations {
					fmt.Fprintln(out, "violation:", v)
				}
			}
			if !rep.OK() || rep.EarlyCloses > 0 {
				return cli.Exit(fmt.Sprintf("verify: %d violations", len(rep.Violations)+rep.ViolationsOmitted), 1)
			}
			if !cmd.Bool("json") {
				fmt.Fprintln(out, "all invariants hold")
			}
			return nil
		},
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// faultFlags are simulate's flags of faults (package simulate/cluster injects them).
func faultFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "faults", Usage: "comma-separated faults to inject while orders are due, one at a time: " +
			strings.Join(cluster.FaultKinds, ", ") + " (redis-restart needs --timer redis and no --redis-url; db-restart needs no --database-url: simulate then runs its own PostgreSQL)"},
		&cli.DurationFlag{Name: "fault-every", Value: cluster.DefaultFaultEvery, Usage: "pause between two faults of --faults"},
	}
}

// ownsDatabase reports whether simulate runs the database itself (--faults db-restart).
func ownsDatabase(cmd *cli.Command) bool {
	kinds, err := cluster.ParseFaults(cmd.String("faults"))
	return err == nil && slices.Contains(kinds, cluster.FaultDBRestart) && cmd.String("database-url") == ""
}

// wechatProvider is the WeChat Pay imitation as simulate's provider: an outcome WeChat Pay
// does not notify (a failed payment) is simulate.ErrNoWebhook.
type wechatProvider struct{ *wechatpaytest.Server }

func (p wechatProvider) Webhook(paymentID, status string) (string, []byte, http.Header, error) {
	path, body, h, err := p.Server.Webhook(paymentID, status)
	if errors.Is(err, wechatpaytest.ErrNotNotified) {
		return "", nil, nil, simulate.ErrNoWebhook
	}
	return path, body, h, err
}

// rate01 reports whether a fault rate is a probability.
func rate01(r float64) bool { return r >= 0 && r <= 1 }
