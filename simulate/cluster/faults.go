package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/orderlyhq/orderly/internal/fault"
)

// Faults of `simulate --faults`, injected one at a time, in the order given, every
// FaultConfig.Every while orders are due (the window of --kill-every).
const (
	// FaultRedisRestart kills the private redis-server (kill -9, no persistence: every key
	// is lost) and starts it again on the same port after redisDown (1 s).
	FaultRedisRestart = "redis-restart"
	// FaultNATSOutage cuts every connection to NATS and refuses new ones for natsDown (3 s).
	FaultNATSOutage = "nats-outage"
	// FaultSIGSTOP stops a random instance (SIGSTOP) for one lease TTL of its jobs plus
	// sigstopExtra (2 s), so that another instance takes its leases over, then resumes it
	// (SIGCONT).
	FaultSIGSTOP = "sigstop"
	// FaultDBRestart restarts the private PostgreSQL server (pg_ctl stop -m fast, dbDown
	// (2 s), start): every instance loses every connection at once.
	FaultDBRestart = "db-restart"
)

// FaultKinds are the known faults, in the order --help lists them.
var FaultKinds = []string{FaultRedisRestart, FaultNATSOutage, FaultSIGSTOP, FaultDBRestart}

// Outages of the faults.
const (
	// DefaultFaultEvery is the pause between two faults: simulate's --fault-every default.
	DefaultFaultEvery = 10 * time.Second
	redisDown         = time.Second
	natsDown          = 3 * time.Second
	dbDown            = 2 * time.Second
	sigstopExtra      = 2 * time.Second
	// SigstopConcurrency is simulate's --concurrency default with sigstop: the requests in
	// flight to an instance just stopped wait for it to resume (until the health check
	// avoids it, ~0.75 s of its share of the traffic: about 50 at 200 orders/s) and keep
	// their slots meanwhile; the rest of the traffic needs slots of its own. Not more:
	// 256 requests in flight queued on the running instances (row gates, pool) past their
	// 10 s request timeout on a busy machine, turning the client's queue into 503s.
	SigstopConcurrency = 96
)

// FaultRecord is one injected fault, as the JSON result lists it.
type FaultRecord struct {
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

// ConfigError is a FaultConfig refused before anything starts. Its message names the
// `orderly simulate` flags that set the fields (--faults, --timer, --redis-url, …), as the
// users of this package meet them.
type ConfigError struct {
	msg string
}

func (e *ConfigError) Error() string { return e.msg }

// ParseFaults returns the fault kinds of a comma-separated list (--faults), without
// repeats, in the order given. Errors: a *ConfigError naming an unknown fault.
func ParseFaults(s string) ([]string, error) {
	var kinds []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "":
		case !slices.Contains(FaultKinds, k):
			return nil, &ConfigError{fmt.Sprintf("--faults: unknown fault %q (known: %s)", k, strings.Join(FaultKinds, ", "))}
		case !slices.Contains(kinds, k):
			kinds = append(kinds, k)
		}
	}
	return kinds, nil
}

// FaultConfig is what PrepareFaults takes: simulate's flags of a run on child instances.
type FaultConfig struct {
	// Faults is the comma-separated list of faults to inject (--faults); "" injects none.
	Faults string
	// Every is the pause between two faults (--fault-every); positive when Faults is set.
	Every time.Duration
	// Instances is the number of instances (--instances); sigstop needs 2 or more.
	Instances int
	// SweepInterval is the instances' --sweep-interval: their lease TTL is
	// max(2 × SweepInterval, 10 s), and sigstop lasts that plus 2 s.
	SweepInterval time.Duration
	// DatabaseURL is --database-url; db-restart needs it empty (simulate runs its own
	// PostgreSQL then).
	DatabaseURL string
	// Timer, RedisURL and NATSURL are the instances' --timer, --redis-url and --nats-url:
	// redis-restart needs Timer "redis" and no RedisURL; nats-outage puts a proxy in front
	// of NATSURL (or of a NATS of its own when empty).
	Timer, RedisURL, NATSURL string
}

// Faults is what simulate owns for a run on child instances: the private servers it
// started (a Redis for --timer redis without --redis-url; NATS and the proxy in front of it
// for nats-outage; PostgreSQL for db-restart) and the faults to inject. Loop injects them;
// Close stops the servers.
type Faults struct {
	kinds    []string
	every    time.Duration
	leaseTTL time.Duration // the instances' lease TTL: sigstop lasts this + sigstopExtra

	redis     *fault.Redis
	nats      *fault.NATS
	natsProxy *fault.Proxy
	pg        *fault.Postgres

	mu      sync.Mutex
	records []FaultRecord
}

// PrepareFaults checks cfg against what simulate owns, before anything starts (errors:
// *ConfigError), and starts the private servers the run needs. It returns the database URL
// to use (the private PostgreSQL's with db-restart, else cfg.DatabaseURL) and the serve
// arguments that point the instances at the private servers (see Overrides). Close stops
// them.
func PrepareFaults(ctx context.Context, cfg FaultConfig) (env *Faults, dbURL string, args []string, err error) {
	kinds, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, "", nil, err
	}
	env = &Faults{kinds: kinds, every: cfg.Every, leaseTTL: max(2*cfg.SweepInterval, 10*time.Second)}
	dbURL = cfg.DatabaseURL
	has := func(k string) bool { return slices.Contains(kinds, k) }
	redisTimer := cfg.Timer == "redis"
	refuse := func(msg string) (*Faults, string, []string, error) { return nil, "", nil, &ConfigError{msg} }
	switch {
	case len(kinds) > 0 && env.every <= 0:
		return refuse("--fault-every must be positive")
	case has(FaultRedisRestart) && !redisTimer:
		return refuse("--faults redis-restart needs --timer redis (without it the instances use no Redis)")
	case has(FaultRedisRestart) && cfg.RedisURL != "":
		return refuse("--faults redis-restart kills Redis: simulate only kills its own; drop --redis-url")
	case has(FaultDBRestart) && dbURL != "":
		return refuse("--faults db-restart restarts the database: simulate only restarts its own PostgreSQL; drop --database-url")
	case has(FaultSIGSTOP) && cfg.Instances < 2:
		return refuse("--faults sigstop needs --instances 2 or more (another instance takes over the stopped one's work)")
	}
	owned := env // env is nil in the error returns below; stop what was started
	defer func() {
		if err != nil {
			owned.Close()
		}
	}()
	if has(FaultDBRestart) {
		if env.pg, err = fault.StartPostgres(ctx); err != nil {
			return nil, "", nil, err
		}
		dbURL = env.pg.URL()
	}
	if redisTimer && cfg.RedisURL == "" {
		if env.redis, err = fault.StartRedis(ctx); err != nil {
			return nil, "", nil, err
		}
		args = append(args, "--redis-url", env.redis.URL())
	}
	if has(FaultNATSOutage) {
		upstream := cfg.NATSURL
		if upstream == "" {
			if env.nats, err = fault.StartNATS(ctx); err != nil {
				return nil, "", nil, err
			}
			upstream = env.nats.URL()
		}
		host, err := hostPort(upstream)
		if err != nil {
			return refuse("--nats-url: " + err.Error())
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

// Overrides returns args (serve flags and values, in pairs) with the flags the private
// servers set (own, from PrepareFaults) replaced: each flag is given once.
func (env *Faults) Overrides(args, own []string) []string {
	var out []string
	for i := 0; i < len(args); i += 2 {
		if !slices.Contains(own, args[i]) {
			out = append(out, args[i], args[i+1])
		}
	}
	return append(out, own...)
}

// Kinds returns the faults to inject, in order.
func (env *Faults) Kinds() []string { return slices.Clone(env.kinds) }

// Records returns the faults injected so far.
func (env *Faults) Records() []FaultRecord {
	env.mu.Lock()
	defer env.mu.Unlock()
	return append([]FaultRecord{}, env.records...)
}

// Close stops the private servers and removes their files.
func (env *Faults) Close() {
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

// Loop injects the faults one after the other, every FaultConfig.Every, until stop is
// closed or ctx ends; a fault under way is always undone (the service back, the instance
// resumed) before it returns. rng picks the instance to stop. A fault that cannot be undone
// (a service that does not come back) ends the run with an error.
func (env *Faults) Loop(ctx context.Context, stop <-chan struct{}, cl *Cluster, rng *rand.Rand) error {
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
func (env *Faults) inject(ctx context.Context, kind string, cl *Cluster, rng *rand.Rand) (FaultRecord, error) {
	rec := FaultRecord{Kind: kind}
	var err error
	if kind != FaultRedisRestart {
		cl.restarts.Lock()
		defer cl.restarts.Unlock()
	}
	start := time.Now()
	rec.At = start.UTC()
	switch kind {
	case FaultRedisRestart:
		rec.Target = "redis " + env.redis.Addr()
		env.redis.Kill()
		if err = sleepCtx(ctx, redisDown); err == nil || ctx.Err() != nil {
			err = env.redis.Start(context.WithoutCancel(ctx))
		}
	case FaultNATSOutage:
		rec.Target = "nats via proxy " + env.natsProxy.Addr()
		env.natsProxy.Cut(natsDown)
		_ = sleepCtx(ctx, natsDown)
	case FaultDBRestart:
		rec.Target = "postgres " + env.pg.Addr()
		err = env.pg.Restart(ctx, dbDown)
	case FaultSIGSTOP:
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
// KillLoop leaves it alone meanwhile. It returns the instance's description.
func (c *Cluster) pause(ctx context.Context, rng *rand.Rand, d time.Duration) (string, error) {
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
