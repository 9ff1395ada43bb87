package saga_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/barrier"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/wakeup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is an orchestrator on a fresh SQLite store, driven by a started closer (the one
// timer) as in the engine.
type env struct {
	store   *sqlstore.DB
	orch    *saga.Orchestrator
	closer  *closer.Closer
	metrics *telemetry.Metrics
	signals wakeup.Hub // to closer
}

// newStore opens a fresh, migrated SQLite store closed when t ends.
func newStore(t *testing.T) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// start runs an orchestrator of defs and a closer timing it on db until stop (or t's end).
func start(t *testing.T, db *sqlstore.DB, defs ...saga.Definition) (e *env, stop func()) {
	t.Helper()
	e = &env{store: db, metrics: telemetry.NewMetrics()}
	var err error
	e.orch, err = saga.New(saga.Config{
		Store: db, Definitions: defs, LeaseMargin: time.Second, Metrics: e.metrics,
		Signals: &e.signals,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.closer, err = closer.New(closer.Config{Store: db, Timed: []closer.Timed{e.orch.Timed()}, MaxSleep: 100 * time.Millisecond, Metrics: e.metrics})
	if err != nil {
		t.Fatal(err)
	}
	e.signals.Connect(e.closer, nil)
	if err := e.orch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.closer.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { e.closer.Stop(); e.orch.Stop() }) }
	t.Cleanup(stop)
	return e, stop
}

// waitState waits until saga id is in state want (10 s at most) and returns it with its log.
func (e *env) waitState(t *testing.T, id string, want saga.State) (*saga.Instance, []*saga.StepRecord) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		inst, log, err := e.orch.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if inst.State == want {
			return inst, log
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga %s is %s after 10 s, want %s; log:\n%s", id, inst.State, want, dump(log))
		}
		time.Sleep(5 * time.Millisecond) // polling the condition, not waiting for a duration
	}
}

func dump(log []*saga.StepRecord) string {
	var b strings.Builder
	for _, r := range log {
		fmt.Fprintf(&b, "  %s/%s #%d %s %s\n", r.StepName, r.Phase, r.Attempt, r.Outcome, r.Error)
	}
	return b.String()
}

// summary is the log as "step/phase:outcome" strings.
func summary(log []*saga.StepRecord) []string {
	out := make([]string, len(log))
	for i, r := range log {
		out[i] = r.StepName + "/" + string(r.Phase) + ":" + string(r.Outcome)
	}
	return out
}

// recorder records the calls participants receive, in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
	keys  map[string][]string // by step/phase: the idempotency keys of every attempt
}

func (r *recorder) add(c *saga.Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c.StepName+"/"+string(c.Phase))
	if r.keys == nil {
		r.keys = map[string][]string{}
	}
	k := c.StepName + "/" + string(c.Phase)
	r.keys[k] = append(r.keys[k], c.IdempotencyKey)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// ok is a participant that records its call and succeeds.
func (r *recorder) ok() saga.Participant {
	return saga.Local(func(_ context.Context, c *saga.Call) error { r.add(c); return nil })
}

// TestTransientRetriedWithGrowingDelaysThenCompensated: a step that keeps failing
// transiently is retried after 20, 40, 80, 160 … ms (no jitter: the delays are exact),
// never earlier, until the next retry would start after its 400 ms deadline; then its
// outcome is unknown and it is compensated, and so is the step before it: the saga ends
// compensated, never stalled. (How many attempts fit before the deadline depends on the
// machine's speed; the delays and the rule do not.)
func TestTransientRetriedWithGrowingDelaysThenCompensated(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	retry := saga.RetryPolicy{InitialInterval: 20 * time.Millisecond, Multiplier: 2, MaxInterval: time.Second, RandomizationFactor: -1, Deadline: 400 * time.Millisecond}
	def := saga.Definition{Name: "transient", Steps: []saga.Step{
		{Name: "reserve", Action: rec.ok(), Compensation: rec.ok()},
		{Name: "capture", Action: saga.Local(func(_ context.Context, c *saga.Call) error {
			rec.add(c)
			return errors.New("gateway: 503")
		}), Compensation: rec.ok(), Retry: retry},
	}}
	e, _ := start(t, newStore(t), def)
	inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "transient", Input: []byte(`{"amount":500}`)})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != saga.StateRunning || inst.Attempts != 1 || inst.WakeAt == nil || inst.StepDeadline == nil {
		t.Fatalf("after the first failure: %s, %d attempts, wake_at %v; want running, 1, a retry time", inst.State, inst.Attempts, inst.WakeAt)
	}
	_, log := e.waitState(t, inst.ID, saga.StateCompensated)
	got := summary(log)
	n := len(got) - 3 // attempts of capture's action
	if n < 2 {
		t.Fatalf("log\n%s\nwant at least two attempts of capture", dump(log))
	}
	want := []string{"reserve/action:succeeded"}
	for range n - 1 {
		want = append(want, "capture/action:transient")
	}
	want = append(want, "capture/action:unknown", "capture/compensation:succeeded", "reserve/compensation:succeeded")
	if !slices.Equal(got, want) {
		t.Fatalf("log\n%s\nwant %v", dump(log), want)
	}
	// Attempt k's retry is due exactly 20 ms × 2^(k-1) after it ended, and attempt k+1
	// starts no earlier (the database clock decides).
	for k := 1; k < n; k++ {
		row, next := log[k], log[k+1]
		if row.RetryAt == nil {
			t.Fatalf("attempt %d has no retry_at", k)
		}
		if got, want := row.RetryAt.Sub(row.EndedAt), 20*time.Millisecond<<(k-1); got != want {
			t.Fatalf("attempt %d: retry %s after it ended, want %s", k, got, want)
		}
		if next.StartedAt.Before(*row.RetryAt) {
			t.Fatalf("attempt %d started at %s, before its retry time %s", k+1, next.StartedAt, row.RetryAt)
		}
		if next.Attempt != k+1 || next.IdempotencyKey != inst.ID+"/capture/action" {
			t.Fatalf("attempt %d: number %d key %q", k+1, next.Attempt, next.IdempotencyKey)
		}
	}
	// The last attempt's retry would have started after the deadline.
	last := log[n]
	if last.RetryAt != nil || !last.EndedAt.Add(retry.Delay(n)).After(*inst.StepDeadline) {
		t.Fatalf("unknown after attempt %d ended at %s: its retry (+%s) is not after the deadline %s", n, last.EndedAt, retry.Delay(n), inst.StepDeadline)
	}
	if got := testutil.ToFloat64(e.metrics.SagaAttempts.WithLabelValues("action", "transient")); got != float64(n-1) {
		t.Fatalf("transient attempts metric %v, want %d", got, n-1)
	}
	// The metric follows the commit that waitState saw: wait for it too.
	ended := e.metrics.SagasEnded.WithLabelValues("compensated")
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(ended) != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("compensated metric %v, want 1", testutil.ToFloat64(ended))
		}
	}
}

// TestRetryDelay: the delays of the policy, with and without jitter.
func TestRetryDelay(t *testing.T) {
	t.Parallel()
	exact := saga.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, RandomizationFactor: -1}
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 9: time.Second} {
		if got := exact.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	jitter := saga.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: 10 * time.Second, RandomizationFactor: 0.1}
	for n := 1; n <= 6; n++ {
		base := 100 * time.Millisecond << (n - 1)
		for range 20 {
			if d := jitter.Delay(n); d < base*9/10 || d > base*11/10 {
				t.Fatalf("Delay(%d) = %s, want within 10 %% of %s", n, d, base)
			}
		}
	}
}

// TestBusinessFailureCompensatesAtOnce: a definitive business failure of step 3 of 4 is
// attempted once, and steps 2 and 1 compensate at once, in reverse order, within Run;
// step 3's compensation and step 4 never run.
func TestBusinessFailureCompensatesAtOnce(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	var debits atomic.Int64
	def := saga.Definition{Name: "checkout", Steps: []saga.Step{
		{Name: "stock", Action: rec.ok(), Compensation: rec.ok()},
		{Name: "coupon", Action: rec.ok(), Compensation: rec.ok()},
		{Name: "wallet", Action: saga.Local(func(_ context.Context, c *saga.Call) error {
			rec.add(c)
			debits.Add(1)
			return saga.Business(errors.New("insufficient balance"))
		}), Compensation: rec.ok()},
		{Name: "paid", Action: rec.ok()},
	}}
	e, _ := start(t, newStore(t), def)
	inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "checkout"})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != saga.StateCompensated || inst.CurrentStep != -1 || inst.EndedAt == nil {
		t.Fatalf("Run left the saga %s at step %d; want compensated at -1, at once", inst.State, inst.CurrentStep)
	}
	wantCalls := []string{"stock/action", "coupon/action", "wallet/action", "coupon/compensation", "stock/compensation"}
	if got := rec.list(); !slices.Equal(got, wantCalls) {
		t.Fatalf("calls %v, want %v", got, wantCalls)
	}
	if debits.Load() != 1 {
		t.Fatalf("the failing step was attempted %d times, want 1", debits.Load())
	}
	_, log, err := e.orch.Get(t.Context(), inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"stock/action:succeeded", "coupon/action:succeeded", "wallet/action:business_failure",
		"coupon/compensation:succeeded", "stock/compensation:succeeded"}
	if got := summary(log); !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	if !strings.Contains(log[2].Error, "insufficient balance") || log[2].IdempotencyKey != inst.ID+"/wallet/action" {
		t.Fatalf("failure row: error %q key %q", log[2].Error, log[2].IdempotencyKey)
	}
}

// TestSlowStepNoOverlapAtMostOnce: a participant (with its own database and the barrier)
// applies its effect and answers after the step's 60 ms timeout; the attempt counts as
// transient, the retry carries the same idempotency key, finds the operation applied and
// succeeds without a second effect; no two executions overlap.
func TestSlowStepNoOverlapAtMostOnce(t *testing.T) {
	t.Parallel()
	pdb, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "participant.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pdb.Close() })
	if err := barrier.CreateTable(t.Context(), pdb, barrier.SQLite); err != nil {
		t.Fatal(err)
	}
	if _, err := pdb.Exec(`CREATE TABLE captures (saga_id TEXT NOT NULL, amount INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	b, _ := barrier.New(pdb, barrier.SQLite)
	var (
		inFlight, maxInFlight atomic.Int64
		mu                    sync.Mutex
		keys                  []string
		results               []barrier.Result
	)
	capture := saga.Local(func(ctx context.Context, c *saga.Call) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		mu.Lock()
		keys = append(keys, c.IdempotencyKey)
		mu.Unlock()
		// The participant finishes its own work whatever the caller's deadline…
		res, err := b.Call(context.WithoutCancel(ctx), barrier.Key{SagaID: c.SagaID, Step: c.StepName, Phase: string(c.Phase)}, func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO captures (saga_id, amount) VALUES (?, 3820)`, c.SagaID)
			return err
		})
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
		if err != nil {
			return err
		}
		if c.Attempt == 1 {
			<-ctx.Done() // …but the first answer comes after the step's timeout
			return ctx.Err()
		}
		return nil
	})
	def := saga.Definition{Name: "slow", Steps: []saga.Step{
		{Name: "capture", Action: capture, Timeout: 60 * time.Millisecond,
			Retry: saga.RetryPolicy{InitialInterval: 10 * time.Millisecond, RandomizationFactor: -1, Deadline: 5 * time.Second}},
	}}
	e, _ := start(t, newStore(t), def)
	inst, err := e.orch.Begin(t.Context(), &saga.StartParams{Definition: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	_, log := e.waitState(t, inst.ID, saga.StateSucceeded)
	if got, want := summary(log), []string{"capture/action:transient", "capture/action:succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	if !strings.Contains(log[0].Error, "timed out after 60ms") {
		t.Fatalf("first attempt error %q, want the timeout", log[0].Error)
	}
	mu.Lock()
	defer mu.Unlock()
	wantKey := inst.ID + "/capture/action"
	if len(keys) != 2 || keys[0] != wantKey || keys[1] != wantKey {
		t.Fatalf("keys %v, want %s twice", keys, wantKey)
	}
	if !slices.Equal(results, []barrier.Result{barrier.Applied, barrier.Duplicate}) {
		t.Fatalf("barrier results %v, want applied then duplicate", results)
	}
	if maxInFlight.Load() != 1 {
		t.Fatalf("%d executions overlapped", maxInFlight.Load())
	}
	var n, sum int64
	if err := pdb.QueryRow(`SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM captures`).Scan(&n, &sum); err != nil {
		t.Fatal(err)
	}
	if n != 1 || sum != 3820 {
		t.Fatalf("%d captures of %d in all, want 1 of 3820", n, sum)
	}
}

// TestCrashDuringCompensationResumes: an orchestrator dies while compensating step 2 (its
// answer is never recorded); a new orchestrator on the same database claims the step when
// the attempt's lease ends, logs it lost, compensates steps 2 and 1 and ends compensated,
// never running an action again.
func TestCrashDuringCompensationResumes(t *testing.T) {
	t.Parallel()
	db := newStore(t)
	entered := make(chan struct{})
	var once sync.Once
	steps := func(rec *recorder, crash bool) []saga.Step {
		comp2 := rec.ok()
		if crash {
			comp2 = saga.Local(func(ctx context.Context, c *saga.Call) error {
				rec.add(c)
				once.Do(func() { close(entered) })
				<-ctx.Done() // the process dies here
				return ctx.Err()
			})
		}
		fail := saga.Local(func(_ context.Context, c *saga.Call) error { rec.add(c); return saga.Business(errors.New("refused")) })
		return []saga.Step{
			{Name: "one", Action: rec.ok(), Compensation: rec.ok()},
			{Name: "two", Action: rec.ok(), Compensation: comp2, Timeout: 200 * time.Millisecond,
				Retry: saga.RetryPolicy{InitialInterval: 10 * time.Millisecond, RandomizationFactor: -1}},
			{Name: "three", Action: fail, Compensation: rec.ok()},
		}
	}
	recA, recB := &recorder{}, &recorder{}
	a, stopA := start(t, db, saga.Definition{Name: "crash", Steps: steps(recA, true)})
	inst, err := a.orch.Begin(t.Context(), &saga.StartParams{Definition: "crash"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	stopA() // the worker's context ends: the compensation's answer is never recorded
	if got, want := recA.list(), []string{"one/action", "two/action", "three/action", "two/compensation"}; !slices.Equal(got, want) {
		t.Fatalf("first process calls %v, want %v", got, want)
	}
	b, _ := start(t, db, saga.Definition{Name: "crash", Steps: steps(recB, false)})
	_, log := b.waitState(t, inst.ID, saga.StateCompensated)
	if got, want := recB.list(), []string{"two/compensation", "one/compensation"}; !slices.Equal(got, want) {
		t.Fatalf("second process calls %v, want %v (never an action)", got, want)
	}
	want := []string{"one/action:succeeded", "two/action:succeeded", "three/action:business_failure",
		"two/compensation:lost", "two/compensation:succeeded", "one/compensation:succeeded"}
	if got := summary(log); !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	if log[3].Attempt != 1 || log[4].Attempt != 2 {
		t.Fatalf("compensation attempts %d, %d; want 1 (lost), 2", log[3].Attempt, log[4].Attempt)
	}
}

// TestStuckAndRedrive: a compensation that fails 3 times (its maximum) leaves the saga
// stuck: no wake_at (nothing claims it again, no hot loop), the stuck metric counts it;
// a re-drive after the participant is fixed resumes compensating and ends compensated.
// Re-driving a saga that is not stuck is refused.
func TestStuckAndRedrive(t *testing.T) {
	t.Parallel()
	var (
		broken   atomic.Bool
		attempts atomic.Int64
		rec      = &recorder{}
	)
	broken.Store(true)
	refund := saga.Local(func(_ context.Context, c *saga.Call) error {
		rec.add(c)
		attempts.Add(1)
		if broken.Load() {
			return errors.New("wallet: 500")
		}
		return nil
	})
	def := saga.Definition{Name: "stuck", Steps: []saga.Step{
		{Name: "debit", Action: rec.ok(), Compensation: refund, MaxCompensationAttempts: 3,
			Retry: saga.RetryPolicy{InitialInterval: 5 * time.Millisecond, RandomizationFactor: -1}},
		{Name: "ship", Action: saga.Local(func(context.Context, *saga.Call) error { return saga.Business(errors.New("no courier")) })},
	}}
	e, _ := start(t, newStore(t), def)
	inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	stuck, log := e.waitState(t, inst.ID, saga.StateStuck)
	if stuck.WakeAt != nil || stuck.Attempts != 3 || stuck.CurrentStep != 0 || !strings.Contains(stuck.LastError, "wallet: 500") {
		t.Fatalf("stuck instance: wake_at %v, attempts %d, step %d, last error %q", stuck.WakeAt, stuck.Attempts, stuck.CurrentStep, stuck.LastError)
	}
	if got := testutil.ToFloat64(e.metrics.SagasStuck); got != 1 {
		t.Fatalf("stuck metric %v, want 1", got)
	}
	if n := len(log); n != 5 || attempts.Load() != 3 {
		t.Fatalf("%d log rows and %d compensation attempts, want 5 and 3:\n%s", n, attempts.Load(), dump(log))
	}
	err = e.store.Read(t.Context(), func(tx store.Tx) error {
		_, ok, err := tx.SagaNextWakeAt(t.Context())
		if err == nil && ok {
			err = errors.New("a stuck saga still waits on the timer")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := e.orch.ListStuck(t.Context(), "", 10)
	if err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("ListStuck: %v, %v", list, err)
	}
	broken.Store(false)
	if _, err := e.orch.RedriveBy(t.Context(), inst.ID, saga.Actor{Operator: "ops-ana", Reason: "participant fixed", TraceID: "tr-9"}); err != nil {
		t.Fatal(err)
	}
	var actions []*store.OperatorAction
	err = e.store.Read(t.Context(), func(tx store.Tx) (err error) {
		actions, err = tx.OperatorActionList(t.Context(), &store.OperatorActionListParams{Target: inst.ID, Limit: 10})
		return err
	})
	if err != nil || len(actions) != 1 || actions[0].Action != "redrive" || actions[0].Operator != "ops-ana" ||
		actions[0].Reason != "participant fixed" || actions[0].TraceID != "tr-9" {
		t.Fatalf("audit of the re-drive: %+v, %v; want one redrive by ops-ana", actions, err)
	}
	done, log := e.waitState(t, inst.ID, saga.StateCompensated)
	if attempts.Load() != 4 || done.EndedAt == nil || log[len(log)-1].Outcome != saga.OutcomeSucceeded || log[len(log)-1].Attempt != 1 {
		t.Fatalf("after re-drive: %d attempts, last row %+v", attempts.Load(), log[len(log)-1])
	}
	if _, err := e.orch.Redrive(t.Context(), inst.ID); orderly.ErrorCode(err) != orderly.ESAGANOTSTUCK {
		t.Fatalf("re-drive of a compensated saga: %v, want %s", err, orderly.ESAGANOTSTUCK)
	}
	if _, err := e.orch.Redrive(t.Context(), "nope"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("re-drive of a missing saga: %v, want %s", err, orderly.ENOTFOUND)
	}
}

// TestLocalTxSteps: LocalTx participants write in the transaction that records their
// step; a failing one's writes roll back (its savepoint) while the steps before it and
// their compensations commit: a business failure at step 3 leaves the rows of steps 1 and
// 2 and of their compensations, none of step 3's; a transient failure leaves none of its
// writes and is retried.
func TestLocalTxSteps(t *testing.T) {
	t.Parallel()
	write := func(name string, fail error) saga.Participant {
		return saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			err := tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/" + name + "/" + fmt.Sprint(c.Attempt), UserID: "u", AmountOff: 1,
				Currency: "EUR", State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
			if err != nil {
				return err
			}
			return fail
		})
	}
	var calls atomic.Int64
	flaky := saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
		if calls.Add(1) == 1 {
			_ = tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/flaky-lost", UserID: "u", AmountOff: 1, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
			return errors.New("lock wait")
		}
		return nil
	})
	defs := []saga.Definition{
		{Name: "local", Steps: []saga.Step{
			{Name: "one", Action: write("one", nil), Compensation: write("undo-one", nil)},
			{Name: "two", Action: write("two", nil), Compensation: write("undo-two", nil)},
			{Name: "three", Action: write("three", saga.Business(errors.New("no"))), Compensation: write("undo-three", nil)},
			{Name: "four", Action: write("four", nil)},
		}},
		{Name: "flaky", Steps: []saga.Step{{Name: "flaky", Action: flaky,
			Retry: saga.RetryPolicy{InitialInterval: 5 * time.Millisecond, RandomizationFactor: -1}}}},
	}
	db := newStore(t)
	e, _ := start(t, db, defs...)
	inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if inst.State != saga.StateCompensated {
		t.Fatalf("saga %s, want compensated within Run", inst.State)
	}
	var coupons []string
	err = db.Read(t.Context(), func(tx store.Tx) error {
		list, err := tx.CouponList(t.Context())
		for _, c := range list {
			coupons = append(coupons, strings.TrimPrefix(c.ID, inst.ID+"/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(coupons)
	if want := []string{"one/1", "two/1", "undo-one/1", "undo-two/1"}; !slices.Equal(coupons, want) {
		t.Fatalf("rows %v, want %v", coupons, want)
	}
	_, log, _ := e.orch.Get(t.Context(), inst.ID)
	if got, want := summary(log), []string{"one/action:succeeded", "two/action:succeeded", "three/action:business_failure",
		"two/compensation:succeeded", "one/compensation:succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	fl, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	_, log = e.waitState(t, fl.ID, saga.StateSucceeded)
	if got, want := summary(log), []string{"flaky/action:transient", "flaky/action:succeeded"}; !slices.Equal(got, want) {
		t.Fatalf("log %v, want %v", got, want)
	}
	err = db.Read(t.Context(), func(tx store.Tx) error {
		_, err := tx.CouponGet(t.Context(), fl.ID+"/flaky-lost")
		switch {
		case err == nil:
			return errors.New("the failed attempt's write is there, want it rolled back")
		case orderly.ErrorCode(err) != orderly.ENOTFOUND:
			return fmt.Errorf("read the failed attempt's write: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// countingStore counts the write transactions of a store, and the statements that write
// saga instances and log rows; the first failFirst transactions run fn and then roll back
// with errInjected, as a transaction whose commit failed.
type countingStore struct {
	store.Store
	writes    atomic.Int64
	failFirst int64
	// Saga writes: instance inserts and updates, log-row statements and the rows in them.
	inserts, updates, stepStatements, stepRows atomic.Int64
}

var errInjected = errors.New("injected: the transaction rolled back")

// countingTx counts a transaction's saga writes into its store.
type countingTx struct {
	store.Tx
	s *countingStore
}

func (t countingTx) SagaInsert(ctx context.Context, s *store.SagaInstance) error {
	t.s.inserts.Add(1)
	return t.Tx.SagaInsert(ctx, s)
}

func (t countingTx) SagaUpdate(ctx context.Context, s *store.SagaInstance) (bool, error) {
	t.s.updates.Add(1)
	return t.Tx.SagaUpdate(ctx, s)
}

func (t countingTx) SagaStepInsert(ctx context.Context, steps ...*store.SagaStep) error {
	t.s.stepStatements.Add(1)
	t.s.stepRows.Add(int64(len(steps)))
	return t.Tx.SagaStepInsert(ctx, steps...)
}

func (s *countingStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	n := s.writes.Add(1)
	return s.Store.InTx(ctx, func(tx store.Tx) error {
		if err := fn(countingTx{tx, s}); err != nil {
			return err
		}
		if n <= s.failFirst {
			return errInjected
		}
		return nil
	})
}

// TestRunLocalSagaInOneTransaction: a saga whose steps are all LocalTx starts and runs in
// one write transaction, which writes the instance once (in the state the run leaves it
// in), its four log rows in one statement and the steps' rows; when that transaction
// fails, Run starts it again the ordinary way (the start, then the steps) and every row is
// written once.
func TestRunLocalSagaInOneTransaction(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	step := func(name string) saga.Step {
		return saga.Step{Name: name, Action: saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			calls.Add(1)
			return tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/" + name, UserID: "u", AmountOff: 1, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
		})}
	}
	def := saga.Definition{Name: "local4", Steps: []saga.Step{step("a"), step("b"), step("c"), step("d")}}
	for _, tc := range []struct {
		failFirst             int64
		wantWrites, wantCalls int64
		// saga writes: instance inserts, updates, log statements
		wantInserts, wantUpdates, wantStepStatements int64
	}{
		{failFirst: 0, wantWrites: 1, wantCalls: 4, wantInserts: 1, wantUpdates: 0, wantStepStatements: 1},
		// the failed try, then the start and the steps (fenced: two updates)
		{failFirst: 1, wantWrites: 3, wantCalls: 8, wantInserts: 2, wantUpdates: 2, wantStepStatements: 2},
	} {
		db := newStore(t)
		cs := &countingStore{Store: db, failFirst: tc.failFirst}
		o, err := saga.New(saga.Config{Store: cs, Definitions: []saga.Definition{def}})
		if err != nil {
			t.Fatal(err)
		}
		calls.Store(0)
		inst, err := o.Run(t.Context(), &saga.StartParams{Definition: "local4"})
		if err != nil {
			t.Fatal(err)
		}
		if inst.State != saga.StateSucceeded {
			t.Fatalf("fail first %d: saga %s, want succeeded", tc.failFirst, inst.State)
		}
		if got := cs.writes.Load(); got != tc.wantWrites {
			t.Fatalf("fail first %d: %d write transactions, want %d", tc.failFirst, got, tc.wantWrites)
		}
		if got := calls.Load(); got != tc.wantCalls {
			t.Fatalf("fail first %d: %d participant calls, want %d", tc.failFirst, got, tc.wantCalls)
		}
		if i, u, st, rows := cs.inserts.Load(), cs.updates.Load(), cs.stepStatements.Load(), cs.stepRows.Load(); i != tc.wantInserts ||
			u != tc.wantUpdates || st != tc.wantStepStatements || rows != 4*tc.wantStepStatements {
			t.Fatalf("fail first %d: %d instance inserts, %d updates, %d log statements of %d rows; want %d, %d, %d of %d",
				tc.failFirst, i, u, st, rows, tc.wantInserts, tc.wantUpdates, tc.wantStepStatements, 4*tc.wantStepStatements)
		}
		got, log, err := o.Get(t.Context(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != saga.StateSucceeded || got.CurrentStep != 4 {
			t.Fatalf("fail first %d: stored saga %s at step %d, want succeeded at 4", tc.failFirst, got.State, got.CurrentStep)
		}
		if want := []string{"a/action:succeeded", "b/action:succeeded", "c/action:succeeded", "d/action:succeeded"}; !slices.Equal(summary(log), want) {
			t.Fatalf("fail first %d: log %v, want %v", tc.failFirst, summary(log), want)
		}
		var n int
		if err := db.Read(t.Context(), func(tx store.Tx) error {
			list, err := tx.CouponList(t.Context())
			n = len(list)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Fatalf("fail first %d: %d rows, want 4 (each step's once)", tc.failFirst, n)
		}
	}
}

// TestStartInTx: a saga written by StartInTx exists exactly when the caller's transaction
// commits. Rolled back, it does not exist; committed and driven, it runs to its end in the
// caller's goroutine; committed and never driven (the caller died), the timer runs it once
// the first attempt's lease (step timeout 50 ms + LeaseMargin 1 s) has ended.
func TestStartInTx(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	def := saga.Definition{Name: "after-move", Steps: []saga.Step{
		{Name: "charge", Action: rec.ok(), Compensation: rec.ok(), Timeout: 50 * time.Millisecond},
		{Name: "record", Action: rec.ok()},
	}}
	e, _ := start(t, newStore(t), def)
	ctx := t.Context()
	begin := func(id string, rollback bool) *saga.Started {
		t.Helper()
		var st *saga.Started
		errRollback := errors.New("the caller's work failed")
		err := e.store.InTx(ctx, func(tx store.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			if st, err = e.orch.StartInTx(ctx, tx, now, &saga.StartParams{Definition: "after-move", ID: id}); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
		if rollback != errors.Is(err, errRollback) || (!rollback && err != nil) {
			t.Fatalf("transaction of %s: %v", id, err)
		}
		return st
	}

	begin("rolled-back", true)
	if _, _, err := e.orch.Get(ctx, "rolled-back"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("saga of a rolled-back transaction: %v, want ENOTFOUND", err)
	}

	st := begin("driven", false)
	if st.ID() != "driven" {
		t.Fatalf("started id %q", st.ID())
	}
	inst, err := e.orch.Drive(ctx, st)
	if err != nil || inst.State != saga.StateSucceeded {
		t.Fatalf("driven saga %+v (%v), want succeeded", inst, err)
	}
	if got, want := rec.list(), []string{"charge/action", "record/action"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}

	begin("orphaned", false)
	written, _, err := e.orch.Get(ctx, "orphaned")
	if err != nil || written.State != saga.StateRunning || written.WakeAt == nil ||
		written.WakeAt.Sub(written.CreatedAt) != 1050*time.Millisecond {
		t.Fatalf("orphaned saga as written %+v (%v), want running with its lease ending 1.05 s after it", written, err)
	}
	_, log := e.waitState(t, "orphaned", saga.StateSucceeded)
	want := []string{"charge/action:lost", "charge/action:succeeded", "record/action:succeeded"}
	if got := summary(log); !slices.Equal(got, want) {
		t.Fatalf("log of the orphaned saga %v, want %v", got, want)
	}
	if log[0].EndedAt.Before(*written.WakeAt) {
		t.Fatalf("the timer ran the orphaned saga at %s, before its lease ended at %s", log[0].EndedAt, written.WakeAt)
	}
	if _, err := e.orch.StartInTx(ctx, nil, time.Now(), &saga.StartParams{Definition: "nope"}); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("unknown definition: %v, want EINVALID", err)
	}
}

// TestJoinRuns: with Config.JoinRuns, Runs that arrive while a transaction is under way
// share the next one. Nine Runs wait while the first blocks in its participant, then
// commit together in one transaction: a member whose id is taken is refused alone
// (ECONFLICT), a member whose second step fails for a business reason is compensated
// within the batch, and the others succeed, each saga's rows written once.
func TestJoinRuns(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	step := func(name string) saga.Participant {
		return saga.LocalTx(func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			switch string(c.Input) {
			case `"block"`:
				<-release
			case `"fail"`:
				if name == "b" {
					return saga.Business(errors.New("refused"))
				}
			}
			return tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/" + name + "/" + string(c.Phase), UserID: "u", AmountOff: 1,
				Currency: "EUR", State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
		})
	}
	def := saga.Definition{Name: "joined", Steps: []saga.Step{
		{Name: "a", Action: step("a"), Compensation: step("a")},
		{Name: "b", Action: step("b")},
	}}
	db := newStore(t)
	cs := &countingStore{Store: db}
	o, err := saga.New(saga.Config{Store: cs, Definitions: []saga.Definition{def}, JoinRuns: 32})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := o.Run(ctx, &saga.StartParams{Definition: "joined", ID: "taken"}); err != nil {
		t.Fatal(err)
	}
	before := cs.writes.Load()
	type result struct {
		inst *saga.Instance
		err  error
	}
	results := make([]result, 10)
	var wg sync.WaitGroup
	run := func(i int, id, input string) {
		wg.Go(func() {
			inst, err := o.Run(ctx, &saga.StartParams{Definition: "joined", ID: id, Input: json.RawMessage(input)})
			results[i] = result{inst, err}
		})
	}
	run(0, "first", `"block"`)
	for o.JoinWaiting() != 0 || cs.writes.Load() == before { // the first batch has begun
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 10; i++ {
		id, input := fmt.Sprintf("joined-%d", i), `"ok"`
		switch i {
		case 3:
			id = "taken"
		case 5:
			input = `"fail"`
		}
		run(i, id, input)
	}
	for o.JoinWaiting() != 9 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if got := cs.writes.Load() - before; got != 2 {
		t.Fatalf("%d write transactions for ten Runs, want 2 (the first alone, then nine joined)", got)
	}
	for i, r := range results {
		switch i {
		case 3:
			if orderly.ErrorCode(r.err) != orderly.ECONFLICT {
				t.Fatalf("run %d with a taken id: %v, want ECONFLICT", i, r.err)
			}
		case 5:
			if r.err != nil || r.inst.State != saga.StateCompensated {
				t.Fatalf("run %d failing its second step: %+v (%v), want compensated", i, r.inst, r.err)
			}
			_, log, err := o.Get(ctx, r.inst.ID)
			if want := []string{"a/action:succeeded", "b/action:business_failure", "a/compensation:succeeded"}; err != nil || !slices.Equal(summary(log), want) {
				t.Fatalf("log of run %d: %v (%v), want %v", i, summary(log), err, want)
			}
		default:
			if r.err != nil || r.inst.State != saga.StateSucceeded {
				t.Fatalf("run %d: %+v (%v), want succeeded", i, r.inst, r.err)
			}
		}
	}
	var rows []*orderly.Coupon
	if err := db.Read(ctx, func(tx store.Tx) (err error) { rows, err = tx.CouponList(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	// "taken" 2 (its first Run), "first" and seven joined successes 2 each, the failed one
	// its action a and a's compensation (b's failed write rolled back with its savepoint).
	if want := 2 + 2 + 7*2 + 2; len(rows) != want {
		t.Fatalf("%d participant rows, want %d", len(rows), want)
	}
}

// TestJoinRunsLeavesOutEndedMember: a start whose context ended while it waited for a
// batch is left out of the batch, which commits the others: its past deadline would have
// ended the shared transaction and sent every member the ordinary way. (Left out, the start
// is answered with its context's error and Run goes the ordinary way, which a real ended
// context refuses at once; this one's Done channel stays open, so it runs there, in
// transactions of its own.)
func TestJoinRunsLeavesOutEndedMember(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	def := saga.Definition{Name: "joined", Steps: []saga.Step{{Name: "a", Action: saga.LocalTx(
		func(ctx context.Context, tx store.Tx, c *saga.Call) error {
			if string(c.Input) == `"block"` {
				<-release
			}
			return tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID, UserID: "u", AmountOff: 1, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
		})}}}
	db := newStore(t)
	cs := &countingStore{Store: db}
	o, err := saga.New(saga.Config{Store: cs, Definitions: []saga.Definition{def}, JoinRuns: 32})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	run := func(ctx context.Context, id, input string) {
		wg.Go(func() {
			if _, err := o.Run(ctx, &saga.StartParams{Definition: "joined", ID: id, Input: json.RawMessage(input)}); err != nil {
				t.Errorf("run %s: %v", id, err)
			}
		})
	}
	run(ctx, "first", `"block"`)
	for o.JoinWaiting() != 0 || cs.writes.Load() == 0 { // the first batch has begun
		time.Sleep(time.Millisecond)
	}
	late := &endingCtx{Context: ctx}
	run(late, "late", `"ok"`)
	run(ctx, "on-time", `"ok"`)
	for o.JoinWaiting() != 2 {
		time.Sleep(time.Millisecond)
	}
	late.ended.Store(true) // its deadline passes while it waits
	close(release)
	wg.Wait()
	// The first batch, the batch of on-time alone, and the late start's own transactions
	// (joined, the three Runs take two).
	if got := cs.writes.Load(); got < 3 {
		t.Fatalf("%d write transactions, want the late start out of the batch (at least 3)", got)
	}
	for _, id := range []string{"first", "late", "on-time"} {
		if inst, _, err := o.Get(ctx, id); err != nil || inst.State != saga.StateSucceeded {
			t.Fatalf("%s: %+v, %v; want succeeded", id, inst, err)
		}
	}
}

// endingCtx is a context whose Err reports its deadline once ended is set; its Done channel
// stays open, so that only a check of Err sees it (as when a deadline passes between two
// checks).
type endingCtx struct {
	context.Context
	ended atomic.Bool
}

func (c *endingCtx) Err() error {
	if c.ended.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}

// TestJoinRunsPanic: a participant that panics inside a joined transaction does not take
// the process down from the joiner's goroutine: the batch rolls back and its members run
// the ordinary way in their callers' goroutines (here the participant's second call
// succeeds).
func TestJoinRunsPanic(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	def := saga.Definition{Name: "panics-once", Steps: []saga.Step{{Name: "a", Action: saga.LocalTx(
		func(context.Context, store.Tx, *saga.Call) error {
			if calls.Add(1) == 1 {
				panic("participant bug")
			}
			return nil
		})}}}
	o, err := saga.New(saga.Config{Store: newStore(t), Definitions: []saga.Definition{def}, JoinRuns: 32,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := o.Run(t.Context(), &saga.StartParams{Definition: "panics-once"})
	if err != nil || inst.State != saga.StateSucceeded {
		t.Fatalf("Run after a panic in its joined transaction: %+v (%v), want succeeded", inst, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("participant called %d times, want 2 (the joined try, then the ordinary one)", n)
	}
}

// TestCallCarried: a value kept by a LocalTx action (Call.Keep) reaches the later actions
// of the same run (one transaction), and nothing else: not the retry of a failed attempt
// (a later transaction), nor a value the failed attempt kept, nor a compensation.
func TestCallCarried(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string // step/phase#attempt=carried
	)
	step := func(keep string, fail func(c *saga.Call) error) saga.Participant {
		return saga.LocalTx(func(_ context.Context, _ store.Tx, c *saga.Call) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s/%s#%d=%v", c.StepName, c.Phase, c.Attempt, c.Carried()))
			mu.Unlock()
			if keep != "" {
				c.Keep(keep + fmt.Sprint(c.Attempt))
			}
			if fail != nil {
				return fail(c)
			}
			return nil
		})
	}
	firstFails := func(c *saga.Call) error {
		if c.Attempt == 1 {
			return errors.New("lock wait")
		}
		return nil
	}
	retry := saga.RetryPolicy{InitialInterval: 5 * time.Millisecond, RandomizationFactor: -1}
	defs := []saga.Definition{
		{Name: "carry", Steps: []saga.Step{
			{Name: "a", Action: step("a", nil)},
			{Name: "b", Action: step("", nil)},
			{Name: "c", Action: step("c", firstFails), Retry: retry},
			{Name: "d", Action: step("", nil)},
		}},
		{Name: "carry-fail", Steps: []saga.Step{
			{Name: "a", Action: step("a", nil), Compensation: step("", nil)},
			{Name: "b", Action: step("b", func(*saga.Call) error { return saga.Business(errors.New("no")) })},
		}},
	}
	db := newStore(t)
	e, _ := start(t, db, defs...)
	inst, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "carry"})
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(t, inst.ID, saga.StateSucceeded)
	fail, err := e.orch.Run(t.Context(), &saga.StartParams{Definition: "carry-fail"})
	if err != nil {
		t.Fatal(err)
	}
	if fail.State != saga.StateCompensated {
		t.Fatalf("carry-fail: %s, want compensated within Run", fail.State)
	}
	want := []string{
		"a/action#1=<nil>", "b/action#1=a1", "c/action#1=a1",
		"c/action#2=<nil>", "d/action#1=c2", // the retry runs in a later transaction
		"a/action#1=<nil>", "b/action#1=a1", "a/compensation#1=<nil>", // b kept b1, then failed
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(seen, want) {
		t.Fatalf("calls saw\n%q\nwant\n%q", seen, want)
	}
}
