package fault

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// startTimeout bounds how long a private server may take to answer after it was started.
const startTimeout = 30 * time.Second

// FreePort returns a free TCP port of 127.0.0.1. It is free when it returns; nothing keeps
// another process from taking it before the caller listens on it.
func FreePort(ctx context.Context) (int, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("fault: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// child is a server process started by this package, restartable with the same arguments.
type child struct {
	name string // "redis-server"
	bin  string
	args []string
	log  string // stdout and stderr of every start, appended

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// start starts the process; it must not be running.
func (c *child) start() error {
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("fault: %s log: %w", c.name, err)
	}
	// The process outlives this call: kill and stop end it, not a context.
	cmd := exec.Command(c.bin, c.args...) //nolint:gosec,noctx // our own server binary and arguments
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("fault: start %s: %w", c.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(exited)
	}()
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	return nil
}

// kill sends SIGKILL and waits for the process to exit; a process not running is left alone.
func (c *child) kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// exitedCh returns a channel closed when the current process exits.
func (c *child) exitedCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exited
}

// waitAnswer polls addr until probe succeeds on a fresh connection, the process exits or
// startTimeout passes.
func waitAnswer(ctx context.Context, name, addr, logPath string, exited <-chan struct{}, probe func(net.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = probeOnce(ctx, addr, probe)
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("fault: %s exited before it answered on %s; its log %s ends:\n%s", name, addr, logPath, tail(logPath, 1500))
		case <-ctx.Done():
			return fmt.Errorf("fault: %s does not answer on %s: %w; its log %s ends:\n%s", name, addr, last, logPath, tail(logPath, 1500))
		case <-tick.C:
		}
	}
}

func probeOnce(ctx context.Context, addr string, probe func(net.Conn) error) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	return probe(conn)
}

// readLinePrefix reads one line from conn and checks that it starts with prefix.
func readLinePrefix(conn net.Conn, prefix string) error {
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, prefix) {
		return fmt.Errorf("unexpected answer %q", strings.TrimSpace(line))
	}
	return nil
}

// tail returns the last n bytes of a file, or why it cannot.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path) //nolint:gosec // a log of our own
	if err != nil {
		return err.Error()
	}
	return strings.TrimRight(string(b[max(int64(len(b))-n, 0):]), "\n")
}

// lookBin finds a server binary on PATH or in the directories Debian installs it to.
func lookBin(name string, dirs ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("fault: %s is not installed (not on PATH nor in %s)", name, strings.Join(dirs, ", "))
}

// Redis is a private redis-server without persistence (--save "" --appendonly no), so a
// kill -9 and start loses every key, as a crashed Redis without persistence does.
type Redis struct {
	addr string
	dir  string
	c    *child
}

// StartRedis starts redis-server on a free port of 127.0.0.1 and waits until it answers PING.
func StartRedis(ctx context.Context) (_ *Redis, err error) {
	bin, err := lookBin("redis-server", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, err
	}
	port, err := FreePort(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "orderly-fault-redis-*")
	if err != nil {
		return nil, err
	}
	r := &Redis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	r.c = &child{name: "redis-server", bin: bin, log: filepath.Join(dir, "redis.log"),
		args: []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir}}
	defer func() {
		if err != nil {
			r.Stop()
		}
	}()
	return r, r.Start(ctx)
}

// URL returns the redis:// URL of database 0.
func (r *Redis) URL() string { return "redis://" + r.addr + "/0" }

// Addr returns host:port.
func (r *Redis) Addr() string { return r.addr }

// Start starts the server again on the same port (after Kill) and waits until it answers.
func (r *Redis) Start(ctx context.Context) error {
	if err := r.c.start(); err != nil {
		return err
	}
	return waitAnswer(ctx, "redis-server", r.addr, r.c.log, r.c.exitedCh(), func(conn net.Conn) error {
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		return readLinePrefix(conn, "+PONG")
	})
}

// Kill sends SIGKILL (kill -9) and waits until the process is gone: every key is lost.
func (r *Redis) Kill() { r.c.kill() }

// Stop kills the server and removes its directory.
func (r *Redis) Stop() {
	r.c.kill()
	_ = os.RemoveAll(r.dir)
}

// NATS is a private nats-server with JetStream, its store in a temporary directory.
type NATS struct {
	addr string
	dir  string
	c    *child
}

// StartNATS starts nats-server -js on a free port of 127.0.0.1 and waits until it greets.
func StartNATS(ctx context.Context) (_ *NATS, err error) {
	bin, err := lookBin("nats-server", "/usr/sbin", "/usr/bin", "/usr/local/bin")
	if err != nil {
		return nil, err
	}
	port, err := FreePort(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "orderly-fault-nats-*")
	if err != nil {
		return nil, err
	}
	n := &NATS{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
	n.c = &child{name: "nats-server", bin: bin, log: filepath.Join(dir, "nats.log"),
		args: []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js")}}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := n.c.start(); err != nil {
		return nil, err
	}
	return n, waitAnswer(ctx, "nats-server", n.addr, n.c.log, n.c.exitedCh(), func(conn net.Conn) error {
		return readLinePrefix(conn, "INFO ")
	})
}

// URL returns the nats:// URL.
func (n *NATS) URL() string { return "nats://" + n.addr }

// Addr returns host:port.
func (n *NATS) Addr() string { return n.addr }

// Stop kills the server and removes its directory.
func (n *NATS) Stop() {
	n.c.kill()
	_ = os.RemoveAll(n.dir)
}
