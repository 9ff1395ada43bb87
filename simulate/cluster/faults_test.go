package cluster

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/internal/testenv"
)

// TestStoppedLeaseHolder stops a real `orderly serve` process (SIGSTOP) while it is inside
// a fenced transaction of its sweep, keeps it stopped past the lease TTL and resumes it
// (SIGCONT). Meanwhile the database ends its idle transaction (releasing the lease row
// and the orders it locked), a second instance takes the sweep lease over with the next
// fencing token and closes every due order; when the stopped one resumes, its run is
// refused by the fence and recorded as "lease lost", and no order was late by more than
// one sweep interval (serve's default, 15 s).
func TestStoppedLeaseHolder(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	bin := buildOrderly(t, t.TempDir())
	dbURL := freshPostgres(t)
	ctx := t.Context()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("application_name", "orderly-victim") // to find its sessions in pg_locks
	u.RawQuery = q.Encode()
	const (
		secret = "test-secret"
		sweep  = time.Second
		ttl    = 10 * time.Second // job.Config.TTL: max(2 × sweep, 10 s)
		orders = 1500
	)
	// The victim closes due orders one per transaction (timer and sweep), so that its sweep
	// is inside a fenced transaction most of the time while orders are due.
	victim, err := Start(ctx, Config{Binary: bin, Instances: 1, DatabaseURL: u.String(), CallbackSecret: secret,
		SweepInterval: sweep, LogDir: t.TempDir(), Extra: []string{"--instance-id", "victim", "--close-batch-size", "1", "--database-max-conns", "6"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(victim.Stop)
	proc := victim.instances[0].cmd.Process
	// SIGCONT before the cluster stops it, whatever happens: a stopped process ignores SIGTERM.
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })

	token := func(owner string) (tok int64) {
		t.Helper()
		err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(token), 0) FROM job_runs WHERE job = 'sweep' AND instance = $1`, owner).Scan(&tok)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	waitFor(t, 20*time.Second, "the victim's first sweep", func() bool { return token("victim") > 0 })

	base := victim.URLs()[0]
	hc := &http.Client{Timeout: 10 * time.Second}
	put(t, hc, base+"/v1/inventory/stopped-sku", `{"available": 1000000}`)
	var wg sync.WaitGroup
	errs := make(chan error, orders)
	sem := make(chan struct{}, 16)
	for i := range orders {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			body := fmt.Sprintf(`{"user_id":"u%d","items":[{"sku":"stopped-sku","quantity":1,"unit_price":100}],"currency":"EUR","payment_timeout_seconds":1}`, i)
			if err := post(ctx, hc, base+"/v1/orders", body, fmt.Sprintf("order-%d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create an order: %v", err)
	}

	// Stop the victim inside a fenced transaction: a session of it holds a row lock on
	// leases (the fence's SELECT … FOR UPDATE) while it is stopped.
	inFence := func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.application_name = 'orderly-victim' AND l.relation = 'leases'::regclass AND l.mode = 'RowShareLock'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	var stoppedAt time.Time
	deadline := time.Now().Add(30 * time.Second)
	for stoppedAt.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("never caught the victim inside a fenced transaction")
		}
		if !inFence() {
			continue
		}
		if err := proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if inFence() {
			stoppedAt = time.Now()
			break
		}
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	stoppedToken := token("victim")
	if stoppedToken == 0 {
		var owner string
		_ = db.QueryRowContext(ctx, `SELECT owner FROM leases WHERE name = 'sweep'`).Scan(&owner)
		t.Fatalf("the victim holds no sweep lease (owner %q)", owner)
	}

	// The database ends the stopped transaction after the idle-in-transaction timeout.
	waitFor(t, 10*time.Second, "the stopped transaction to be ended", func() bool { return !inFence() })
	if d := time.Since(stoppedAt); d > 8*time.Second {
		t.Errorf("the stopped transaction held its locks %v; want about the idle-in-transaction timeout (1 s)", d.Round(time.Millisecond))
	}

	taker, err := Start(ctx, Config{Binary: bin, Instances: 1, DatabaseURL: dbURL, CallbackSecret: secret,
		SweepInterval: sweep, LogDir: t.TempDir(), Extra: []string{"--instance-id", "taker", "--database-max-conns", "6"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(taker.Stop)
	waitFor(t, ttl+10*time.Second, "the taker's sweep under the next token", func() bool { return token("taker") > stoppedToken })

	// Resume the victim past the lease TTL.
	if err := sleepCtx(ctx, time.Until(stoppedAt.Add(ttl+2*time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var lostErr string
	waitFor(t, 15*time.Second, `the victim's run recorded as "lease lost"`, func() bool {
		err := db.QueryRowContext(ctx, `SELECT error FROM job_runs WHERE job = 'sweep' AND instance = 'victim' AND token = $1
			AND error LIKE '%lease lost%' ORDER BY id LIMIT 1`, stoppedToken).Scan(&lostErr)
		return err == nil
	})
	t.Logf("the victim's run under token %d: %s", stoppedToken, lostErr)

	var owner string
	var leaseToken int64
	if err := db.QueryRowContext(ctx, `SELECT owner, token FROM leases WHERE name = 'sweep'`).Scan(&owner, &leaseToken); err != nil {
		t.Fatal(err)
	}
	if owner != "taker" || leaseToken != stoppedToken+1 {
		t.Errorf("sweep lease: owner %q, token %d; want taker, %d (the victim never took it back)", owner, leaseToken, stoppedToken+1)
	}
	// Every order is closed, none later than one sweep interval.
	var open, closed int
	var maxLate sql.NullInt64
	waitFor(t, 15*time.Second, "every order closed", func() bool {
		err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE state = 'pending_payment'), count(*) FILTER (WHERE state = 'closed'),
			MAX(closed_at - close_at) FROM orders`).Scan(&open, &closed, &maxLate)
		if err != nil {
			t.Fatal(err)
		}
		return open == 0
	})
	if closed != orders {
		t.Errorf("%d orders closed, want %d", closed, orders)
	}
	logLatest(t, db, stoppedAt)
	if late := time.Duration(maxLate.Int64) * time.Millisecond; late > engine.DefaultSweepInterval {
		t.Errorf("an order closed %v late; want at most one sweep interval (%v)", late, engine.DefaultSweepInterval)
	} else {
		t.Logf("max lateness %v with the lease holder stopped %v", late, ttl+2*time.Second)
	}
	if c := victim.Crashes(); len(c) > 0 {
		t.Errorf("the victim crashed: %v", c)
	}
}

// waitFor polls cond every 20 ms until it holds, failing t after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		if err := sleepCtx(t.Context(), 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

func put(t *testing.T, hc *http.Client, url, body string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: %s", url, resp.Status)
	}
}

func post(ctx context.Context, hc *http.Client, url, body, key string) error {
	// A 503 (the shared test database refusing connections: too many clients) is sent again
	// for up to 20 s; the Idempotency-Key keeps it one order.
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusCreated:
			var o struct{ ID string }
			return json.Unmarshal(b.Bytes(), &o)
		case resp.StatusCode == http.StatusServiceUnavailable && time.Now().Before(deadline):
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		default:
			return fmt.Errorf("POST %s: %s %s", url, resp.Status, b.String())
		}
	}
}

// TestParseFaults checks the fault list: order kept, repeats and blanks dropped.
func TestParseFaults(t *testing.T) {
	t.Parallel()
	got, err := ParseFaults(" sigstop,redis-restart,,sigstop ,db-restart")
	if err != nil || strings.Join(got, " ") != "sigstop redis-restart db-restart" {
		t.Errorf("parseFaults = %v, %v", got, err)
	}
}

// logLatest logs the five latest closes: how late, when due and closed relative to the
// stop, and by which trigger.
func logLatest(t *testing.T, db *sql.DB, stoppedAt time.Time) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT o.closed_at - o.close_at, o.close_at, o.closed_at, t.actor FROM orders o
		JOIN order_transitions t ON t.order_id = o.id AND t.to_state = 'closed' ORDER BY 1 DESC LIMIT 5`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var late, closeAt, closedAt int64
		var actor string
		if err := rows.Scan(&late, &closeAt, &closedAt, &actor); err != nil {
			t.Fatal(err)
		}
		t.Logf("late %d ms: due %+v, closed %+v after the stop, by %s", late,
			time.UnixMilli(closeAt).Sub(stoppedAt).Round(time.Millisecond), time.UnixMilli(closedAt).Sub(stoppedAt).Round(time.Millisecond), actor)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFaultsOneInstanceDownAtATime checks that the faults keep to what a deployment is
// sized for: one instance down at a time. A SIGSTOP holds the cluster's restart lock for
// its whole pause, so that killLoop cannot kill (and restart) another instance meanwhile;
// a Redis outage does not, since instances start and serve without Redis.
func TestFaultsOneInstanceDownAtATime(t *testing.T) {
	testenv.Long(t)
	dir := t.TempDir()
	cl := &Cluster{}
	for i := range 2 {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Skipf("no sleep(1): %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("instance-%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; _ = log.Close() })
		cl.instances = append(cl.instances, &instance{n: i + 1, cmd: cmd, exited: exited, log: log})
	}
	env := &Faults{leaseTTL: 300 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		_, err := env.inject(t.Context(), FaultSIGSTOP, cl, rand.New(rand.NewPCG(1, 2)))
		done <- err
	}()
	waitFor(t, 10*time.Second, "an instance stopped", func() bool { return len(cl.running()) == 1 })
	if cl.restarts.TryLock() {
		cl.restarts.Unlock()
		t.Fatal("the restart lock is free while an instance is stopped: a kill could take down a second one")
	}
	if err := <-done; err != nil {
		t.Fatalf("sigstop: %v", err)
	}
	if len(cl.running()) != 2 || !cl.restarts.TryLock() {
		t.Fatal("after the pause: want both instances running and the restart lock free")
	}
	cl.restarts.Unlock()
}
