package cluster

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver, to create and drop the test database
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// buildOrderly builds the orderly command into dir; it skips the test under -short.
func buildOrderly(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the orderly binary; skipped with -short")
	}
	bin := filepath.Join(dir, "orderly")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/orderlyhq/orderly/cmd/orderly").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freshPostgres creates an empty PostgreSQL database on the server of
// ORDERLY_TEST_POSTGRES_URL (skipping the test without it) and drops it when the test ends.
func freshPostgres(t *testing.T) string {
	t.Helper()
	base := testdb.URL(t, "postgres")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("orderly_sim_%012x", rand.Uint64()>>16) //nolint:gosec // a name, not a secret
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// FORCE: a killed instance's backend may not have noticed yet that it is gone.
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// TestLifecycle drives a cluster of one instance on a SQLite file directly: KillLoop kills
// and restarts, an instance that dies on its own is a crash, Stop stops all.
func TestLifecycle(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	bin := buildOrderly(t, t.TempDir())
	dir := t.TempDir()
	c, err := Start(t.Context(), Config{Binary: bin, Instances: 1, DatabaseURL: filepath.Join(dir, "o.db"),
		CallbackSecret: "s", LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	in := c.instances[0]
	in.mu.Lock()
	firstPID := in.cmd.Process.Pid
	in.mu.Unlock()

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- c.KillLoop(t.Context(), stop, 50*time.Millisecond, rand.New(rand.NewPCG(1, 2))) }()
	deadline := time.Now().Add(30 * time.Second)
	for c.Kills() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling a counter of another goroutine's progress
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("KillLoop: %v", err)
	}
	in.mu.Lock()
	pid := in.cmd.Process.Pid
	in.mu.Unlock()
	if c.Kills() < 2 || pid == firstPID {
		t.Fatalf("kills %d, pid %d (first %d): want a restarted instance", c.Kills(), pid, firstPID)
	}
	if err := c.waitReady(t.Context(), in); err != nil {
		t.Fatalf("after KillLoop: %v", err)
	}
	if crashes := c.Crashes(); len(crashes) != 0 {
		t.Fatalf("kills taken for crashes: %v", crashes)
	}

	// Dying on its own (here: SIGKILL from outside the cluster) is a crash.
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	in.mu.Unlock()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if crashes := c.Crashes(); len(crashes) != 1 || !strings.Contains(crashes[0], "exited on its own: signal: killed") {
		t.Fatalf("crashes %q, want the one instance", crashes)
	}

	if err := c.startAndWait(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	c.Stop()
	in.mu.Lock()
	exitErr := in.exitErr
	in.mu.Unlock()
	if exitErr != nil || len(c.Crashes()) != 1 {
		t.Errorf("after Stop: exit %v, crashes %q; want a clean exit (SIGTERM) and no new crash", exitErr, c.Crashes())
	}
	if err := c.start(in); err == nil {
		t.Error("start after Stop succeeded")
	}
	log, err := os.ReadFile(in.logPath)
	if err != nil || !strings.Contains(string(log), "SIGKILL to instance 1") {
		t.Errorf("log %s: %v\n%s", in.logPath, err, log)
	}
}

// TestClusterArgs checks the arguments an instance gets: serve's, to simulate instance.
func TestClusterArgs(t *testing.T) {
	t.Parallel()
	c := &Cluster{cfg: Config{DatabaseURL: "postgres://db", CallbackSecret: "s3", SweepInterval: 2 * time.Second,
		Extra: []string{"--timer", "redis", "--redis-url", "redis://r"}}}
	got := strings.Join(c.args(&instance{addr: "127.0.0.1:4000"}), " ")
	want := "simulate instance --addr 127.0.0.1:4000 --database-url postgres://db --callback-secret s3 --sweep-interval 2s --timer redis --redis-url redis://r"
	if got != want {
		t.Errorf("args\n got %s\nwant %s", got, want)
	}
}

// TestInstanceEnv: instances inherit no ORDERLY_* variable, so that a shell set up for
// `orderly serve` lends none of its services to test traffic.
func TestInstanceEnv(t *testing.T) {
	t.Parallel()
	env := instanceEnv([]string{"PATH=/bin", "ORDERLY_DATABASE_URL=shop.db", "ORDERLY_NATS_URL=nats://prod", "TMPDIR=/tmp", "ORDERLY_TIMER=redis"})
	if got := strings.Join(env, " "); got != "PATH=/bin TMPDIR=/tmp" {
		t.Errorf("instance environment %q, want no ORDERLY_* variable", got)
	}
}
