package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver, to create and drop the test database
	"github.com/urfave/cli/v3"

	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/internal/testenv"
)

// buildOrderly builds the orderly command into dir; it skips the test under -short.
func buildOrderly(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the orderly binary; skipped with -short")
	}
	bin := filepath.Join(dir, "orderly")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
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

// runOrderly runs the built command with a temporary directory as TMPDIR (the instances'
// logs go there) and returns its stdout and stderr.
func runOrderly(t *testing.T, bin string, timeout time.Duration, args ...string) (stdout, stderr []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 10 * time.Second
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// clusterResult is the JSON of `simulate` on child instances.
type clusterResult struct {
	Orders      int      `json:"orders"`
	Paid        int      `json:"paid"`
	Closed      int      `json:"closed"`
	Cancelled   int      `json:"cancelled"`
	EarlyCloses int      `json:"early_closes"`
	Violations  []string `json:"violations"`
	Instances   int      `json:"instances"`
	Kills       int      `json:"kills"`
	Lateness    struct {
		P99 float64 `json:"p99"`
		Max float64 `json:"max"`
	} `json:"lateness_ms"`
}

// decodeCluster checks that stdout is one JSON object with exactly the keys of a
// single-instance result plus instances and kills, and decodes it.
func decodeCluster(t *testing.T, stdout []byte) *clusterResult {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(stdout, &keys); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	want := []string{"cancelled", "clock", "closed", "created", "duplicate_callbacks", "duration_s", "early_closes", "errors", "gateway",
		"instances", "kills", "late_payments", "lateness_ms", "missed_deadline", "near_deadline", "orders", "orders_per_s", "paid",
		"paid_share", "payers", "payers_paid", "planned_paid_share", "queue_wait_ms", "refunded", "rejected", "send_s", "sent", "violations"}
	got := make([]string, 0, len(keys))
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	var res clusterResult
	if err := json.Unmarshal(stdout, &res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// TestSimulateInstances builds the binary once and runs `simulate` with child instances.
func TestSimulateInstances(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	bin := buildOrderly(t, t.TempDir())
	t.Run("postgres", func(t *testing.T) { t.Parallel(); testSimulateCluster(t, bin) })
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); testSimulateKillOnSQLite(t, bin) })
}

// testSimulateCluster is the acceptance run on many instances: three `orderly serve`
// processes on one fresh PostgreSQL database, one of them SIGKILLed and restarted every
// 2 s while orders are due; every invariant must hold at the end. The sweep is ten minutes
// away and lateness is bounded by the timers: a deadline reaches the other instances at
// the latest at their poll cap (5 s on PostgreSQL), plus 1 s.
func testSimulateCluster(t *testing.T, bin string) {
	db := freshPostgres(t)
	start := time.Now()
	stdout, stderr, err := runOrderly(t, bin, 3*time.Minute, "simulate", "--database-url", db,
		"--instances", "3", "--kill-every", "2s", "--orders", "300", "--rate", "100", "--payment-timeout", "2s", "--json",
		"--sweep-interval", "10m", "--max-lateness", "6s", "--min-created-share", "0.8")
	t.Logf("simulate took %s; stderr:\n%s", time.Since(start).Round(time.Millisecond), stderr)
	res := decodeCluster(t, stdout)
	if err != nil || len(res.Violations) != 0 || res.EarlyCloses != 0 {
		t.Fatalf("simulate: %v; %d violations, %d early closes:\n%s", err, len(res.Violations), res.EarlyCloses,
			strings.Join(res.Violations, "\n"))
	}
	if res.Instances != 3 || res.Kills < 1 {
		t.Errorf("instances %d, kills %d; want 3 and at least 1", res.Instances, res.Kills)
	}
	if res.Orders == 0 || res.Paid+res.Closed+res.Cancelled != res.Orders || res.Paid == 0 || res.Closed == 0 {
		t.Errorf("orders %d = paid %d + closed %d + cancelled %d?", res.Orders, res.Paid, res.Closed, res.Cancelled)
	}
	t.Logf("%d orders, %d kills, lateness p99 %.0f ms, max %.0f ms", res.Orders, res.Kills, res.Lateness.P99, res.Lateness.Max)
}

// testSimulateKillOnSQLite kills and restarts the only instance, on a temporary SQLite
// file: the requests that meet it down wait for it to come back.
func testSimulateKillOnSQLite(t *testing.T, bin string) {
	stdout, stderr, err := runOrderly(t, bin, 2*time.Minute, "simulate",
		"--kill-every", "1s", "--orders", "100", "--rate", "50", "--payment-timeout", "1s", "--json")
	res := decodeCluster(t, stdout)
	if err != nil || len(res.Violations) != 0 || res.EarlyCloses != 0 {
		t.Fatalf("simulate: %v; violations:\n%s\nstderr:\n%s", err, strings.Join(res.Violations, "\n"), stderr)
	}
	if res.Instances != 1 || res.Kills < 1 {
		t.Errorf("instances %d, kills %d; want 1 and at least 1", res.Instances, res.Kills)
	}
	if !strings.Contains(string(stderr), "logs in ") {
		t.Errorf("stderr does not say where the logs are:\n%s", stderr)
	}
}

// TestSimulateClusterFlags checks the refusals that happen before anything starts.
func TestSimulateClusterFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--instances", "3"}, want: "SQLite is a single-machine store"},
		{args: []string{"--instances", "2", "--database-url", "orderly.db"}, want: "SQLite is a single-machine store"},
		{args: []string{"--instances", "0"}, want: "at least 1"},
		{args: []string{"--kill-every", "-1s"}, want: "must not be negative"},
		{args: []string{"--target", "http://127.0.0.1:1", "--callback-secret", "s", "--instances", "2"}, want: "do not go with --target"},
		{args: []string{"--target", "http://127.0.0.1:1", "--callback-secret", "s", "--redis-url", "redis://x"}, want: "do not go with --target"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		app := newApp(&stdout, &stderr)
		app.ExitErrHandler = func(context.Context, *cli.Command, error) {} // return the error, do not exit
		err := app.Run(t.Context(), append([]string{"orderly", "simulate"}, tt.args...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("simulate %v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

// TestSimulateFaultFlags checks the refusals of --faults that happen before anything
// starts: each fault needs something simulate owns.
func TestSimulateFaultFlags(t *testing.T) {
	t.Parallel()
	pg := "postgres://postgres@127.0.0.1:1/x"
	tests := []struct {
		args []string
		want string
	}{
		{args: []string{"--faults", "redis-restart,oops"}, want: `unknown fault "oops"`},
		{args: []string{"--instances", "2", "--database-url", pg, "--faults", "redis-restart"}, want: "needs --timer redis"},
		{args: []string{"--instances", "2", "--database-url", pg, "--timer", "redis", "--redis-url", "redis://127.0.0.1:6379/0", "--faults", "redis-restart"},
			want: "simulate only kills its own; drop --redis-url"},
		{args: []string{"--instances", "2", "--database-url", pg, "--faults", "db-restart"}, want: "simulate only restarts its own PostgreSQL; drop --database-url"},
		{args: []string{"--database-url", pg, "--faults", "sigstop"}, want: "needs --instances 2 or more"},
		{args: []string{"--instances", "2", "--database-url", pg, "--faults", "sigstop", "--fault-every", "0s"}, want: "--fault-every must be positive"},
		{args: []string{"--instances", "2", "--database-url", pg, "--faults", "nats-outage", "--nats-url", "nats://a:1,nats://b:2"}, want: "one server"},
		{args: []string{"--target", "http://127.0.0.1:1", "--callback-secret", "s", "--faults", "sigstop"}, want: "do not go with --target"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		app := newApp(&stdout, &stderr)
		app.ExitErrHandler = func(context.Context, *cli.Command, error) {} // return the error, do not exit
		err := app.Run(t.Context(), append([]string{"orderly", "simulate"}, tt.args...))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("simulate %v: error %v, want %q", tt.args, err, tt.want)
		}
	}
}
