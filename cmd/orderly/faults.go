package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/internal/fault"
)

// Faults of `simulate --faults`, injected one at a time, in the order given, every
// --fault-every while orders are due (the window of --kill-every).
const (
	// faultRedisRestart kills the private redis-server (kill -9, no persistence: every key
	// is lost) and starts it again on the same port after redisDown.
	faultRedisRestart = "redis-restart"
	// faultNATSOutage cuts every connection to NATS and refuses new ones for natsDown.
	faultNATSOutage = "nats-outage"
	// faultSIGSTOP stops a random instance (SIGSTOP) for one lease TTL of its jobs plus
	// sigstopExtra, so that another instance takes its leases over, then resumes it
	// (SIGCONT).
	faultSIGSTOP = "sigstop"
	// faultDBRestart restarts the private PostgreSQL server (pg_ctl stop -m fast, dbDown,
	// start): every instance loses every connection at once.
	faultDBRestart = "db-restart"
)

var faultKinds = []string{faultRedisRestart, faultNATSOutage, faultSIGSTOP, faultDBRestart}

// Outages of the faults.
const (
	defaultFaultEvery = 10 * time.Second
	redisDown         = time.Second
	natsDown          = 3 * time.Second
	dbDown            = 2 * time.Second
	sigstopExtra      = 2 * time.Second
	// sigstopConcurrency is simulate's --concurrency default with sigstop: the requests in
	// flight to an instance just stopped wait for it to resume (until the health check
	// avoids it, ~0.75 s of its share of the traffic: about 50 at 200 orders/s) and keep
	// their slots meanwhile; the rest of the traffic needs slots of its own. Not more:
	// 256 requests in flight queued on the running instances (row gates, pool) past their
	// 10 s request timeout on a busy machine, turning the client's queue into 503s.
	sigstopConcurrency = 96
)

// faultRecord is one injected fault, as the JSON result lists it.
type faultRecord struct {
	Kind string `json:"kind"`
	// At is when the fault began, UTC.
	At time.Time `json:"at"`
	// DurationMS is how long the fault lasted, from its start until the service was back
	// (answering again) or the instance resumed, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Target names what was broken: "redis 127.0.0.1:port", "instance 2 (pid …)", ….
	Target string `json:"target"`
	// Error says why the fault could not be injected or undone, when it could not.
	Error string `json:"error,omitempty"`
}

// faultFlags are simulate's flags of faults.
func faultFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "faults", Usage: "comma-separated faults to inject while orders are due, one at a time: " +
			strings.Join(faultKinds, ", ") + " (redis-restart needs --timer redis and no --redis-url; db-restart needs no --database-url: simulate then runs its own PostgreSQL)"},
		&cli.DurationFlag{Name: "fault-every", Value: defaultFaultEvery, Usage: "pause between two faults of --faults"},
	}
}

// parseFaults returns the fault kinds of --faults, without repeats, in the order given.
func parseFaults(s string) ([]string, error) {
	var kinds []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "":
		case !slices.Contains(faultKinds, k):
			return nil, fmt.Errorf("--faults: unknown fault %q (known: %s)", k, strings.Join(faultKinds, ", "))
		case !slices.Contains(kinds, k):
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

// faultEnv is what simulate owns for a run on child instances: the private servers it
// started (a Redis for --timer redis without --redis-url; NATS and the proxy in front of it
// for nats-outage; PostgreSQL for db-restart) and the faults to inject.
type faultEnv struct {
	kinds    []string
	every    time.Duration
	leaseTTL time.Duration // the instances' lease TTL: sigstop lasts this + sigstopExtra

	redis     *fault.Redis
	nats      *fault.NATS
	natsProxy *fault.Proxy
	pg        *fault.Postgres

	mu      sync.Mutex
	records []faultRecord
}

// prepareFaults checks --faults against what simulate owns, before anything starts, and
// starts the private servers the run needs. It returns the database URL to use (the
// private PostgreSQL's with db-restart) and the serve arguments that point the instances
// at the private servers. Close stops them.
func prepareFaults(ctx context.Context, cmd *cli.Command) (env *faultEnv, dbURL string, args []string, err error) {
	kinds, err := parseFaults(cmd.String("faults"))
	if err != nil {
		return nil, "", nil, cli.Exit(err.Error(), 2)
	}
	env = &faultEnv{kinds: kinds, every: cmd.Duration("fault-every"),
		leaseTTL: max(2*cmd.Duration("sweep-interval"), 10*time.Second)}
	dbURL = cmd.String("database-url")
	has := func(k string) bool { return slices.Contains(kinds, k) }
	redisTimer := cmd.String("timer") == "redis"
	switch {
	case len(kinds) > 0 && env.every <= 0:
		return nil, "", nil, cli.Exit("--fault-every must be positive", 2)
	case has(faultRedisRestart) && !redisTimer:
		return nil, "", nil, cli.Exit("--faults redis-restart needs --timer redis (without it the instances use no Redis)", 2)
	case has(faultRedisRestart) && cmd.String("redis-url") != "":
		return nil, "", nil, cli.Exit("--faults redis-restart kills Redis: simulate only kills its own; drop --redis-url", 2)
	case has(faultDBRestart) && dbURL != "":
		return nil, "", nil, cli.Exit("--faults db-restart restarts the database: simulate only restarts its own PostgreSQL; drop --database-url", 2)
	case has(faultSIGSTOP) && cmd.Int("instances") < 2:
		return nil, "", nil, cli.Exit("--faults sigstop needs --instances 2 or more (another instance takes over the stopped one's work)", 2)
	}
	owned := env // env is nil in the error returns below; stop what was started
	defer func() {
		if err != nil {
			owned.Close()
		}
	}()
	if has(faultDBRestart) {
		if env.pg, err = fault.StartPostgres(ctx); err != nil {
			return nil, "", nil, err
		}
		dbURL = env.pg.URL()
	}
	if redisTimer && cmd.String("redis-url") == "" {
		if env.redis, err = fault.StartRedis(ctx); err != nil {
			return nil, "", nil, err
		}
		args = append(args, "--redis-url", env.redis.URL())
	}
	if has(faultNATSOutage) {
		upstream := cmd.String("nats-url")
		if upstream == "" {
			if env.nats, err = fault.StartNATS(ctx); err != nil {
				return nil, "", nil, err
			}
			upstream = env.nats.URL()
		}
		host, err := hostPort(upstream)
		if err != nil {
			return nil, "", nil, cli.Exit("--nats-url: "+err.Error(), 2)
		}
		if env.natsProxy, err = fault.StartProxy(ctx, host); err != nil {
			return nil, "", nil, err
		}
		args = append(args, "--nats-url", "nats://"+env.natsProxy.Addr())
	}
	return env, dbURL, args, nil
}

// hostPort returns the host:port of a nats://host:port URL (4222 when it has no port).
func hostPort(raw string) (string, error) {
	rest, ok := strings.CutPrefix(raw, "nats://")
	if !ok || rest == "" || strings.ContainsAny(rest, ",/@") {
		return "", fmt.Errorf("%q: want nats://host:port (one server, no credentials) to put a proxy in front of", raw)
	}
	if !strings.Contains(rest, ":") {
		rest += ":4222"
	}
	return rest, nil
}

// overrides replaces in args the serve flags the private servers set (each is given once).
func (env *faultEnv) overrides(args, own []string) []string {
	var out []string
	for i := 0; i < len(args); i += 2 {
		if !slices.Contains(own, args[i]) {
			out = append(out, args[i], args[i+1])
		}
	}
	return append(out, own...)
}

// Records returns the faults injected so far.
func (env *faultEnv) Records() []faultRecord {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]faultRecord{}, env.records...)
}

// Close stops the private servers and removes their files.
func (env *faultEnv) Close() {
	if env.natsProxy != nil {
		_ = env.natsProxy.Close()
	}
	if env.nats != nil {
		env.nats.Stop()
	}
	if env.redis != nil {
		env.redis.Stop()
	}
	if env.pg != nil {
		env.pg.Stop()
	}
}

// loop injects the faults one after the other, every env.every, until stop is closed or
// ctx ends; a fault under way is always undone (the service back, the instance resumed)
// before it returns. rng picks the instance to stop. A fault that cannot be undone (a
// service that does not come back) ends the run with an error.
func (env *faultEnv) loop(ctx context.Context, stop <-chan struct{}, cl *cluster, rng *rand.Rand) error {
	if len(env.kinds) == 0 {
		return nil
	}
	tick := time.NewTicker(env.every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-tick.C:
		}
		rec, err := env.inject(ctx, env.kinds[i%len(env.kinds)], cl, rng)
		env.mu.Lock()
		env.records = append(env.records, rec)
		env.mu.Unlock()
		if err != nil {
			return err
		}
		tick.Reset(env.every) // the pause is between the end of one fault and the next
	}
}

// inject injects one fault and undoes it, holding the cluster's restart lock but for
// redis-restart:
//   - The outage of a service serve needs to start (the database; NATS, whose stream it
//     sets up) holds it: an instance killed by --kill-every is started again only while
//     they answer.
//   - A Redis outage does not: serve starts and serves without its delay queue (the
//     database timer and the sweep close orders meanwhile), and an instance killed during
//     it must come back, as one would in production.
//   - sigstop holds it too: a stopped instance is a failed instance, and a deployment of N
//     instances is sized to survive one failure at a time (plus an outage of Redis or
//     NATS), not a SIGSTOP of one while another is killed and restarting. Letting them
//     overlap left one instance of three for the whole traffic, with the requests in
//     flight to the stopped one hanging 12 s; no retry window short of the whole pause
//     covers that, and a longer one would hide real failures. Kills wait for the pause
//     to end (and a pause for a restart to finish).
func (env *faultEnv) inject(ctx context.Context, kind string, cl *cluster, rng *rand.Rand) (faultRecord, error) {
	rec := faultRecord{Kind: kind}
	var err error
	if kind != faultRedisRestart {
		cl.restarts.Lock()
		defer cl.restarts.Unlock()
	}
	start := time.Now()
	rec.At = start.UTC()
	switch kind {
	case faultRedisRestart:
		rec.Target = "redis " + env.redis.Addr()
		env.redis.Kill()
		if err = sleepCtx(ctx, redisDown); err == nil || ctx.Err() != nil {
			err = env.redis.Start(context.WithoutCancel(ctx))
		}
	case faultNATSOutage:
		rec.Target = "nats via proxy " + env.natsProxy.Addr()
		env.natsProxy.Cut(natsDown)
		_ = sleepCtx(ctx, natsDown)
	case faultDBRestart:
		rec.Target = "postgres " + env.pg.Addr()
		err = env.pg.Restart(ctx, dbDown)
	case faultSIGSTOP:
		rec.Target, err = cl.pause(ctx, rng, env.leaseTTL+sigstopExtra)
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	rec.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		rec.Error = err.Error()
		if errors.Is(err, errNoneRunning) {
			return rec, nil // every instance was down: nothing to stop this time
		}
		return rec, fmt.Errorf("fault %s: %w", kind, err)
	}
	return rec, nil
}

// errNoneRunning is pause's error when no instance is running.
var errNoneRunning = errors.New("no instance running")

// pause stops a random running instance with SIGSTOP for d, then resumes it with SIGCONT;
// killLoop leaves it alone meanwhile. It returns the instance's description.
func (c *cluster) pause(ctx context.Context, rng *rand.Rand, d time.Duration) (string, error) {
	running := c.running()
	if len(running) == 0 {
		return "", errNoneRunning
	}
	in := running[rng.IntN(len(running))]
	in.mu.Lock()
	if in.cmd == nil || in.hasExited() {
		in.mu.Unlock()
		return "", errNoneRunning
	}
	in.paused = true
	proc := in.cmd.Process
	in.mu.Unlock()
	defer func() {
		in.mu.Lock()
		in.paused = false
		in.mu.Unlock()
	}()
	target := fmt.Sprintf("instance %d (pid %d)", in.n, proc.Pid)
	fmt.Fprintf(in.log, "=== %s orderly simulate: SIGSTOP to instance %d (pid %d) for %s\n", time.Now().UTC().Format(time.RFC3339Nano), in.n, proc.Pid, d)
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		return target, fmt.Errorf("SIGSTOP %s: %w", target, err)
	}
	_ = sleepCtx(ctx, d)
	fmt.Fprintf(in.log, "=== %s orderly simulate: SIGCONT to instance %d (pid %d)\n", time.Now().UTC().Format(time.RFC3339Nano), in.n, proc.Pid)
	if err := proc.Signal(syscall.SIGCONT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return target, fmt.Errorf("SIGCONT %s: %w", target, err)
	}
	return target, nil
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ownsDatabase reports whether simulate runs the database itself (--faults db-restart).
func ownsDatabase(cmd *cli.Command) bool {
	kinds, err := parseFaults(cmd.String("faults"))
	return err == nil && slices.Contains(kinds, faultDBRestart) && cmd.String("database-url") == ""
}

// writeFaults prints the faults injected, one a line, for the summary.
func writeFaults(w io.Writer, faults []faultRecord) {
	for i, f := range faults {
		label := ""
		if i == 0 {
			label = "faults"
		}
		fmt.Fprintf(w, "  %-11s %s %s at %s for %d ms", label, f.Kind, f.Target, f.At.Format("15:04:05.000"), f.DurationMS)
		if f.Error != "" {
			fmt.Fprintf(w, " (%s)", f.Error)
		}
		fmt.Fprintln(w)
	}
}
