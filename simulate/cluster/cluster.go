// Package cluster runs several serve child processes (`orderly simulate instance`: serve with
// simulate's saga faults) on one database for `orderly simulate --instances` and the
// project's multi-instance tests: it starts them on
// free 127.0.0.1 ports, waits until each is ready, SIGKILLs and restarts them now and then
// (Cluster.KillLoop), and injects real faults (Faults: Redis killed, NATS cut off, an
// instance stopped with SIGSTOP, PostgreSQL restarted) into the services it runs itself.
// See docs/architecture.md for where it sits.
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds of a cluster's child processes.
const (
	DefaultReadyTimeout = 30 * time.Second // from start until /readyz answers 200
	stopGrace           = 5 * time.Second  // from SIGTERM until SIGKILL
	readyPoll           = 50 * time.Millisecond
)

// Config configures Start.
type Config struct {
	// Binary is the orderly executable the instances run (os.Executable() for simulate).
	Binary string
	// Instances is the number of `orderly serve` processes, at least 1.
	Instances int
	// DatabaseURL is the database every instance opens (--database-url).
	DatabaseURL string
	// CallbackSecret is every instance's --callback-secret.
	CallbackSecret string
	// SweepInterval is every instance's --sweep-interval; 0 leaves serve's default.
	SweepInterval time.Duration
	// Extra are more serve arguments, given to every instance after the others.
	Extra []string
	// LogDir receives instance-N.log, each instance's stdout and stderr across restarts.
	LogDir string
	// ReadyTimeout bounds how long an instance may take to answer GET /readyz with 200;
	// DefaultReadyTimeout (30 s).
	ReadyTimeout time.Duration
}

// Cluster is a set of `orderly serve` child processes on one database, each on its own
// 127.0.0.1 port, for `orderly simulate --instances`. It can SIGKILL an instance and start
// it again on the same port (KillLoop); Stop stops them all. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg       Config
	instances []*instance
	ready     *http.Client
	kills     atomic.Int64
	// restarts is held from a SIGKILL until the instance is ready again (KillLoop), across
	// the outage of a service the instances need to start (Faults: the database, NATS;
	// not Redis, without which they serve) and across a SIGSTOP, so that one instance at a
	// time is down.
	restarts sync.Mutex

	mu      sync.Mutex
	crashes []string // instances that exited on their own, described
	stopped bool
}

// instance is one child process slot: its port and log stay across restarts.
type instance struct {
	n       int    // 1-based
	addr    string // host:port it listens on
	logPath string
	log     *os.File // set before the first start, closed by Stop once every process exited

	mu      sync.Mutex
	cmd     *exec.Cmd     // the current process; nil before the first start
	exited  chan struct{} // closed when the current process has exited
	exitErr error         // its Wait error, once exited is closed
	// expected marks an exit the cluster caused (kill, stop), not a crash.
	expected bool
	// paused marks a process stopped with SIGSTOP (FaultSIGSTOP); KillLoop spares it.
	paused bool
}

// Start starts cfg.Instances instances and waits until each answers /readyz: the first
// one alone, so that it applies the migrations before the others open the database. On
// error every instance started is stopped. Errors name the instance and end with the tail
// of its log.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Instances < 1 {
		return nil, errors.New("cluster: at least one instance")
	}
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	c := &Cluster{cfg: cfg, ready: &http.Client{
		Timeout:   time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports, err := freePorts(ctx, cfg.Instances)
	if err != nil {
		return nil, err
	}
	for i, port := range ports {
		in := &instance{n: i + 1, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			logPath: filepath.Join(cfg.LogDir, fmt.Sprintf("instance-%d.log", i+1))}
		if in.log, err = os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		c.instances = append(c.instances, in)
	}
	if err := c.startAndWait(ctx, c.instances[0]); err != nil {
		return nil, err
	}
	errs := make([]error, len(c.instances))
	var wg sync.WaitGroup
	for i, in := range c.instances[1:] {
		wg.Go(func() { errs[i+1] = c.startAndWait(ctx, in) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// freePorts returns n distinct free TCP ports of 127.0.0.1. They are free when it returns;
// nothing keeps another process from taking one before an instance listens on it.
func freePorts(ctx context.Context, n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cluster: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// URLs returns the instances' base URLs, e.g. "http://127.0.0.1:41234".
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.instances))
	for i, in := range c.instances {
		urls[i] = "http://" + in.addr
	}
	return urls
}

// LogPaths returns the instances' log files.
func (c *Cluster) LogPaths() []string {
	paths := make([]string, len(c.instances))
	for i, in := range c.instances {
		paths[i] = in.logPath
	}
	return paths
}

// Kills returns the number of SIGKILLs sent by KillLoop.
func (c *Cluster) Kills() int { return int(c.kills.Load()) }

// Crashes describes the instances that exited without being killed or stopped.
func (c *Cluster) Crashes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.crashes...)
}

// args returns the arguments of an instance: `orderly simulate instance`, serve with the
// saga faults of Extra.
func (c *Cluster) args(in *instance) []string {
	args := []string{"simulate", "instance", "--addr", in.addr, "--database-url", c.cfg.DatabaseURL, "--callback-secret", c.cfg.CallbackSecret}
	if c.cfg.SweepInterval > 0 {
		args = append(args, "--sweep-interval", c.cfg.SweepInterval.String())
	}
	return append(args, c.cfg.Extra...)
}

// start starts the instance's process. It is an error to start a running instance or one
// of a stopped cluster.
func (c *Cluster) start(in *instance) error {
	in.mu.Lock() // before c.mu: Stop, which sets stopped first, then finds this process
	defer in.mu.Unlock()
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped {
		return fmt.Errorf("cluster: instance %d: the cluster is stopped", in.n)
	}
	if in.cmd != nil && !in.hasExited() {
		return fmt.Errorf("cluster: instance %d is running", in.n)
	}
	// Our own binary and arguments; the process outlives this call and the cluster ends it
	// (kill, Stop), not a context.
	cmd := exec.Command(c.cfg.Binary, c.args(in)...) //nolint:gosec,noctx // see above
	cmd.Stdout, cmd.Stderr = in.log, in.log
	cmd.Env = instanceEnv(os.Environ())
	fmt.Fprintf(in.log, "=== %s orderly simulate: starting instance %d on %s\n", time.Now().UTC().Format(time.RFC3339Nano), in.n, in.addr)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start instance %d: %w", in.n, err)
	}
	exited := make(chan struct{})
	in.cmd, in.exited, in.exitErr, in.expected = cmd, exited, nil, false
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(in.log, "=== %s orderly simulate: instance %d (pid %d) exited: %v\n",
			time.Now().UTC().Format(time.RFC3339Nano), in.n, cmd.Process.Pid, exitText(err))
		in.mu.Lock()
		in.exitErr = err
		expected := in.expected
		in.mu.Unlock()
		if !expected {
			c.mu.Lock()
			if !c.stopped {
				c.crashes = append(c.crashes, fmt.Sprintf("instance %d (pid %d) exited on its own: %s; see %s",
					in.n, cmd.Process.Pid, exitText(err), in.logPath))
			}
			c.mu.Unlock()
		}
		close(exited) // after the crash is recorded: who waits for the exit sees it
	}()
	return nil
}

// instanceEnv is the environment of an instance: this process's without the ORDERLY_*
// variables, so that a shell set up for `orderly serve` (ORDERLY_DATABASE_URL,
// ORDERLY_REDIS_URL, ORDERLY_NATS_URL, …) lends none of its services to test traffic;
// instances get their configuration from their arguments only.
func instanceEnv(environ []string) []string {
	return slices.DeleteFunc(slices.Clone(environ), func(kv string) bool { return strings.HasPrefix(kv, "ORDERLY_") })
}

// hasExited reports whether the current process exited; in.mu is held.
func (in *instance) hasExited() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// startAndWait starts the instance and waits until it is ready.
func (c *Cluster) startAndWait(ctx context.Context, in *instance) error {
	if err := c.start(in); err != nil {
		return err
	}
	return c.waitReady(ctx, in)
}

// waitReady polls GET /readyz until it answers 200, the process exits, ReadyTimeout
// passes or ctx ends.
func (c *Cluster) waitReady(ctx context.Context, in *instance) error {
	in.mu.Lock()
	exited := in.exited
	in.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReadyTimeout)
	defer cancel()
	url := "http://" + in.addr + "/readyz"
	poll := time.NewTicker(readyPoll)
	defer poll.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.ready.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			in.mu.Lock()
			exitErr := in.exitErr
			in.mu.Unlock()
			return fmt.Errorf("cluster: instance %d exited before it was ready (%s); its log %s ends:\n%s",
				in.n, exitText(exitErr), in.logPath, tail(in.logPath, 2000))
		case <-ctx.Done():
			return fmt.Errorf("cluster: instance %d on %s not ready: %w; its log %s ends:\n%s",
				in.n, in.addr, context.Cause(ctx), in.logPath, tail(in.logPath, 2000))
		case <-poll.C:
		}
	}
}

// tail returns the last n bytes of a file, or why it cannot.
func tail(path string, n int64) string {
	f, err := os.Open(path) //nolint:gosec // an instance's log, a path of our own
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	return strings.TrimRight(string(b), "\n")
}

// errNotRunning is kill's error for an instance whose process is not running.
var errNotRunning = errors.New("not running")

// kill sends SIGKILL to the instance's process and waits for it to exit.
func (c *Cluster) kill(in *instance) error {
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	if cmd == nil || in.hasExited() || in.paused {
		in.mu.Unlock()
		return fmt.Errorf("cluster: instance %d: %w", in.n, errNotRunning)
	}
	in.expected = true
	in.mu.Unlock()
	fmt.Fprintf(in.log, "=== %s orderly simulate: SIGKILL to instance %d (pid %d)\n", time.Now().UTC().Format(time.RFC3339Nano), in.n, cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("cluster: kill instance %d: %w", in.n, err)
	}
	c.kills.Add(1)
	<-exited
	return nil
}

// KillLoop SIGKILLs a random running instance every d and starts it again on the same port,
// waiting until it is ready, until stop is closed or ctx ends. rng picks the victims. It
// returns an error when an instance cannot be started again.
func (c *Cluster) KillLoop(ctx context.Context, stop <-chan struct{}, d time.Duration, rng *rand.Rand) error {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case <-tick.C:
		}
		running := c.running()
		if len(running) == 0 {
			continue
		}
		if err := c.killAndRestart(ctx, running[rng.IntN(len(running))]); err != nil {
			return err
		}
		// d from now on: a kill that waited for a fault (a SIGSTOP holds the restart lock
		// 12 s) is not followed at once by the tick that came meanwhile.
		tick.Reset(d)
	}
}

// killAndRestart SIGKILLs the instance and starts it again, holding c.restarts.
func (c *Cluster) killAndRestart(ctx context.Context, in *instance) error {
	c.restarts.Lock()
	defer c.restarts.Unlock()
	if err := c.kill(in); errors.Is(err, errNotRunning) {
		return nil // it crashed meanwhile: Crashes reports it
	} else if err != nil {
		return err
	}
	// Start it again even when stop closed meanwhile: the run goes on and counts on it.
	if err := c.startAndWait(ctx, in); err != nil && ctx.Err() == nil {
		return fmt.Errorf("restart after SIGKILL: %w", err)
	}
	return nil
}

// Stop stops every instance: SIGTERM, then SIGKILL after stopGrace, and waits for them to
// exit; then it closes their logs. Later starts fail. Safe to call twice.
func (c *Cluster) Stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range c.instances {
		wg.Go(func() { in.stop() })
	}
	wg.Wait()
	for _, in := range c.instances {
		_ = in.log.Close() // a second Close fails harmlessly
	}
}

func (in *instance) stop() {
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	if cmd == nil || in.hasExited() {
		in.mu.Unlock()
		return
	}
	in.expected = true
	in.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-exited:
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}

// running returns the instances whose process runs and is not stopped by a sigstop fault.
func (c *Cluster) running() []*instance {
	var running []*instance
	for _, in := range c.instances {
		in.mu.Lock()
		if in.cmd != nil && !in.hasExited() && !in.paused {
			running = append(running, in)
		}
		in.mu.Unlock()
	}
	return running
}
