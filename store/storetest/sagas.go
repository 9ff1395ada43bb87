package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func testSagas(t *testing.T, open opener) {
	t.Run("RoundTrip", func(t *testing.T) { testSagaRoundTrip(t, open) })
	t.Run("UpdateFencedByVersion", func(t *testing.T) { testSagaUpdateFenced(t, open) })
	t.Run("DueWakeOverdue", func(t *testing.T) { testSagaDue(t, open) })
	t.Run("DueSkipsLocked", func(t *testing.T) { testSagaDueSkipsLocked(t, open) })
	t.Run("Checks", func(t *testing.T) { testSagaChecks(t, open) })
	t.Run("StepsAndList", func(t *testing.T) { testSagaStepsAndList(t, open) })
}

// insertSaga inserts a running saga waiting until wakeAt.
func insertSaga(t *testing.T, s store.Store, wakeAt time.Time) *store.SagaInstance {
	t.Helper()
	deadline := wakeAt.Add(time.Minute)
	in := &store.SagaInstance{ID: nextID("saga"), Definition: "checkout", State: "running", CurrentStep: 0,
		Input: []byte(`{"order_id":"o-1"}`), WakeAt: &wakeAt, StepDeadline: &deadline, Attempts: 1, AttemptStartedAt: &t0,
		CreatedAt: t0, UpdatedAt: t0}
	inTx(t, s, func(tx store.Tx) error { return tx.SagaInsert(t.Context(), in) })
	return in
}

func getSaga(t *testing.T, s store.Store, id string) *store.SagaInstance {
	t.Helper()
	var got *store.SagaInstance
	readTx(t, s, func(tx store.Tx) (err error) { got, err = tx.SagaGet(t.Context(), id); return err })
	return got
}

func testSagaRoundTrip(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	in := insertSaga(t, s, t0.Add(1500*time.Millisecond))
	got := getSaga(t, s, in.ID)
	if got.ID != in.ID || got.Definition != "checkout" || got.State != "running" || got.CurrentStep != 0 ||
		string(got.Input) != `{"order_id":"o-1"}` || !got.WakeAt.Equal(t0.Add(1500*time.Millisecond)) ||
		!got.StepDeadline.Equal(t0.Add(1500*time.Millisecond+time.Minute)) || got.Attempts != 1 ||
		!got.AttemptStartedAt.Equal(t0) || got.LastError != "" || !got.CreatedAt.Equal(t0) || got.EndedAt != nil || got.Version != 1 {
		t.Fatalf("got %+v", got)
	}
	err := s.InTx(ctx, func(tx store.Tx) error { return tx.SagaInsert(ctx, in) })
	if orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Fatalf("duplicate insert: %v, want %s", err, orderly.ECONFLICT)
	}
	err = s.Read(ctx, func(tx store.Tx) error { _, err := tx.SagaGet(ctx, "missing"); return err })
	if orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("get missing: %v, want %s", err, orderly.ENOTFOUND)
	}
}

func testSagaUpdateFenced(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	in := insertSaga(t, s, t0)
	stale := *in
	ended := t0.Add(time.Second)
	in.State, in.CurrentStep, in.WakeAt, in.StepDeadline, in.Attempts, in.AttemptStartedAt = "succeeded", 2, nil, nil, 0, nil
	in.LastError, in.UpdatedAt, in.EndedAt = "x", ended, &ended
	var ok bool
	inTx(t, s, func(tx store.Tx) (err error) { ok, err = tx.SagaUpdate(ctx, in); return err })
	if !ok || in.Version != 2 {
		t.Fatalf("update: ok %v, version %d; want true, 2", ok, in.Version)
	}
	got := getSaga(t, s, in.ID)
	if got.State != "succeeded" || got.CurrentStep != 2 || got.WakeAt != nil || got.StepDeadline != nil || got.AttemptStartedAt != nil ||
		got.LastError != "x" || !got.EndedAt.Equal(ended) || !got.UpdatedAt.Equal(ended) || got.Version != 2 {
		t.Fatalf("after update: %+v", got)
	}
	stale.LastError = "stale runner"
	inTx(t, s, func(tx store.Tx) (err error) { ok, err = tx.SagaUpdate(ctx, &stale); return err })
	if ok || stale.Version != 1 {
		t.Fatalf("an update with version 1 after version 2 changed the row (ok %v)", ok)
	}
	if got := getSaga(t, s, in.ID); got.LastError != "x" {
		t.Fatalf("last error %q after a fenced update", got.LastError)
	}
}

func testSagaDue(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	late := insertSaga(t, s, t0.Add(2*time.Second))
	early := insertSaga(t, s, t0.Add(time.Second))
	insertSaga(t, s, t0.Add(time.Hour))
	var (
		next time.Time
		ok   bool
		n    int64
		due  []*store.SagaInstance
	)
	readTx(t, s, func(tx store.Tx) (err error) {
		if next, ok, err = tx.SagaNextWakeAt(ctx); err != nil {
			return err
		}
		n, err = tx.SagasOverdueCount(ctx, t0.Add(1500*time.Millisecond))
		return err
	})
	if !ok || !next.Equal(t0.Add(time.Second)) || n != 1 {
		t.Fatalf("next wake %v (%v), overdue %d; want %v, 1", next, ok, n, t0.Add(time.Second))
	}
	inTx(t, s, func(tx store.Tx) (err error) { due, err = tx.SagasDue(ctx, t0.Add(2*time.Second), 10); return err })
	if len(due) != 2 || due[0].ID != early.ID || due[1].ID != late.ID {
		t.Fatalf("due %v, want [%s %s] (earliest first; a wake_at 1 h later is not due)", sagaIDs(due), early.ID, late.ID)
	}
	inTx(t, s, func(tx store.Tx) (err error) {
		due, err = tx.SagasDue(ctx, t0.Add(2*time.Second-time.Millisecond), 10)
		return err
	})
	if len(due) != 1 || due[0].ID != early.ID {
		t.Fatalf("due 1 ms before the later wake_at: %v, want [%s]", sagaIDs(due), early.ID)
	}
}

func sagaIDs(list []*store.SagaInstance) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.ID
	}
	return out
}

func testSagaDueSkipsLocked(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	a := insertSaga(t, s, t0)
	b := insertSaga(t, s, t0.Add(time.Millisecond))
	if s.Dialect() == "sqlite" {
		return // one writer: a claim cannot meet another's lock
	}
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.SagaLock(ctx, a.ID); err != nil {
				return err
			}
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	var due []*store.SagaInstance
	err := s.InTx(ctx, func(tx store.Tx) (err error) { due, err = tx.SagasDue(ctx, t0.Add(time.Second), 10); return err })
	close(release)
	if derr := <-done; err != nil || derr != nil {
		t.Fatalf("claim: %v; holder: %v", err, derr)
	}
	if len(due) != 1 || due[0].ID != b.ID {
		t.Fatalf("claimed %v while %s is locked, want only %s", sagaIDs(due), a.ID, b.ID)
	}
}

// testSagaChecks: the schema refuses an unknown state, a running saga without wake_at, an
// ended one without ended_at, and a log row with an unknown outcome.
func testSagaChecks(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	in := insertSaga(t, s, t0)
	bad := []struct {
		name string
		edit func(c *store.SagaInstance)
	}{
		{"unknown state", func(c *store.SagaInstance) { c.State = "paused" }},
		{"running without wake_at", func(c *store.SagaInstance) { c.WakeAt = nil }},
		{"stuck with wake_at", func(c *store.SagaInstance) { c.State = "stuck" }},
		{"succeeded without ended_at", func(c *store.SagaInstance) { c.State, c.WakeAt = "succeeded", nil }},
	}
	for _, b := range bad {
		c := *in
		b.edit(&c)
		err := s.InTx(ctx, func(tx store.Tx) error { _, err := tx.SagaUpdate(ctx, &c); return err })
		if err == nil {
			t.Errorf("%s: written, want a CHECK violation", b.name)
		}
	}
	err := s.InTx(ctx, func(tx store.Tx) error {
		return tx.SagaStepInsert(ctx, &store.SagaStep{SagaID: in.ID, StepName: "a", Phase: "action", Attempt: 1, Outcome: "maybe",
			IdempotencyKey: "k", StartedAt: t0, EndedAt: t0})
	})
	if err == nil {
		t.Error("a step with outcome maybe was written, want a CHECK violation")
	}
}

func testSagaStepsAndList(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	a := insertSaga(t, s, t0)
	b := insertSaga(t, s, t0)
	outcomes := []string{"transient", "succeeded", "business_failure"}
	inTx(t, s, func(tx store.Tx) error {
		var rows []*store.SagaStep
		for i, o := range outcomes {
			phase := "action"
			if i == 2 {
				phase = "compensation"
			}
			rows = append(rows, &store.SagaStep{SagaID: a.ID, Step: i, StepName: "s", Phase: phase, Attempt: i + 1, Outcome: o,
				IdempotencyKey: a.ID + "/s/" + phase, StartedAt: t0.Add(time.Duration(i) * time.Second), EndedAt: t0.Add(time.Duration(i)*time.Second + 5*time.Millisecond), Error: o})
		}
		// One row alone (the prepared statement), then two in one statement.
		if err := tx.SagaStepInsert(ctx, rows[0]); err != nil {
			return err
		}
		return tx.SagaStepInsert(ctx, rows[1:]...)
	})
	var steps []*store.SagaStep
	readTx(t, s, func(tx store.Tx) (err error) { steps, err = tx.SagaSteps(ctx, a.ID); return err })
	if len(steps) != 3 {
		t.Fatalf("%d steps, want 3", len(steps))
	}
	for i, st := range steps {
		if st.Outcome != outcomes[i] || st.Attempt != i+1 || st.Step != i || st.Error != outcomes[i] ||
			!st.StartedAt.Equal(t0.Add(time.Duration(i)*time.Second)) || st.EndedAt.Sub(st.StartedAt) != 5*time.Millisecond {
			t.Fatalf("step %d: %+v", i, st)
		}
	}
	// More rows in one call than one statement takes: written in the order given.
	many := make([]*store.SagaStep, 70)
	for i := range many {
		many[i] = &store.SagaStep{SagaID: b.ID, Step: 0, StepName: "s", Phase: "action", Attempt: i + 1, Outcome: "transient",
			IdempotencyKey: b.ID + "/s/action", StartedAt: t0, EndedAt: t0}
	}
	inTx(t, s, func(tx store.Tx) error { return tx.SagaStepInsert(ctx, many...) })
	readTx(t, s, func(tx store.Tx) (err error) { steps, err = tx.SagaSteps(ctx, b.ID); return err })
	if len(steps) != len(many) {
		t.Fatalf("%d steps of %d written in one call", len(steps), len(many))
	}
	for i, st := range steps {
		if st.Attempt != i+1 {
			t.Fatalf("step %d read back is attempt %d: not in the order written", i, st.Attempt)
		}
	}
	b.State, b.WakeAt, b.AttemptStartedAt = "stuck", nil, nil
	inTx(t, s, func(tx store.Tx) error { _, err := tx.SagaUpdate(ctx, b); return err })
	var all, stuck []*store.SagaInstance
	readTx(t, s, func(tx store.Tx) (err error) {
		if all, err = tx.SagaList(ctx, "", &store.ListParams{Limit: 10}); err != nil {
			return err
		}
		stuck, err = tx.SagaList(ctx, "stuck", &store.ListParams{Limit: 10})
		return err
	})
	if got := sagaIDs(all); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Fatalf("list %v", got)
	}
	if got := sagaIDs(stuck); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("stuck %v, want [%s]", got, b.ID)
	}
}
