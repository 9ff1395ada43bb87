package fault

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Postgres is a private PostgreSQL cluster: initdb into a temporary directory, one server
// on a free port of 127.0.0.1 (trust authentication, user postgres, database postgres)
// that Restart stops and starts again, so that a run can see its database go away and come
// back without touching a shared server. Durability is off (fsync, synchronous_commit):
// the restart is a clean one (pg_ctl stop -m fast), which loses nothing committed.
//
// initdb refuses to run as root: as root, the server runs as the user postgres.
type Postgres struct {
	bin  string // directory of initdb, pg_ctl
	dir  string // temporary directory: data/, the socket, the log
	port int
	cred *syscall.Credential // nil: run as the current user
}

// StartPostgres creates and starts the cluster. Errors: PostgreSQL not installed (looked
// for in /usr/lib/postgresql/*/bin and on PATH), running as root without a postgres user,
// initdb or the server failing (their output is in the error).
func StartPostgres(ctx context.Context) (_ *Postgres, err error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	port, err := FreePort(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "orderly-fault-pg-*")
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin, dir: dir, port: port}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("fault: initdb refuses root and there is no postgres user to run it as: %w", err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, fmt.Errorf("fault: %w", err)
		}
	}
	if err := p.run(ctx, "initdb", "-D", p.data(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, err
	}
	return p, p.Start(ctx)
}

// postgresBin returns the bin directory of the newest PostgreSQL installed.
func postgresBin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	slices.SortFunc(found, func(a, b string) int { return versionOf(b) - versionOf(a) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), nil
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("fault: PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/pg_ctl, no pg_ctl on PATH)")
}

func versionOf(pgCtl string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(pgCtl))))
	return v
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// run runs one of PostgreSQL's programs as the cluster's user and returns its output in
// the error.
func (p *Postgres) run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, prog), args...) //nolint:gosec // PostgreSQL's own programs
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	cmd.Dir = p.dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fault: %s %v: %w\n%s", prog, args, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// URL returns the postgres:// URL of the database postgres.
func (p *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", p.Addr())
}

// Addr returns host:port.
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// Start starts the server and waits until it accepts connections (pg_ctl -w).
func (p *Postgres) Start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off "+
		"-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=64MB", p.port, p.dir)
	return p.run(ctx, "pg_ctl", "-D", p.data(), "-l", filepath.Join(p.dir, "postgres.log"), "-w",
		"-t", strconv.Itoa(int(startTimeout/time.Second)), "-o", opts, "start")
}

// Stop stops the server (mode fast: sessions are ended, nothing committed is lost) and
// waits until it is down.
func (p *Postgres) stop(ctx context.Context, mode string) error {
	return p.run(ctx, "pg_ctl", "-D", p.data(), "-m", mode, "-w", "stop")
}

// Restart stops the server (every session ends), keeps it down for down, and starts it
// again on the same port.
func (p *Postgres) Restart(ctx context.Context, down time.Duration) error {
	if err := p.stop(ctx, "fast"); err != nil {
		return err
	}
	t := time.NewTimer(down)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return p.Start(context.WithoutCancel(ctx))
}

// Stop stops the server at once (mode immediate) and removes the cluster.
func (p *Postgres) Stop() {
	if _, err := os.Stat(filepath.Join(p.data(), "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		_ = p.stop(ctx, "immediate")
		cancel()
	}
	_ = os.RemoveAll(p.dir)
}
