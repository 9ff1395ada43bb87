package fault_test

import (
	"context"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/internal/fault"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// TestSaga: each injected fault does what fault.Saga says, decided by its draw: a
// failure before the participant runs (it never runs), a slow call that then runs, a
// timeout after the participant ran (it ran once, the attempt is transient and retried
// with the same key), no fault; and rates outside 0 … 1 are refused.
func TestSaga(t *testing.T) {
	t.Parallel()
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for _, tc := range []struct {
		name    string
		draw    float64
		runs    int // calls of the participant during the first attempt
		outcome saga.Outcome
		slow    bool
	}{
		{"fail", 0.05, 0, saga.OutcomeTransient, false},
		{"slow", 0.15, 1, saga.OutcomeSucceeded, true},
		{"timeout after apply", 0.25, 1, saga.OutcomeTransient, false},
		{"none", 0.5, 1, saga.OutcomeSucceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, keys := 0, map[string]bool{}
			f := &fault.Saga{FailRate: 0.1, SlowRate: 0.1, TimeoutAfterApplyRate: 0.1, Slow: 30 * time.Millisecond,
				Float64: func() float64 { return tc.draw }}
			p := saga.Local(func(_ context.Context, c *saga.Call) error {
				runs++
				keys[c.IdempotencyKey] = true
				return nil
			})
			o, err := saga.New(saga.Config{Store: db, Wrap: f.Wrap, Definitions: []saga.Definition{{Name: "f-" + tc.name, Steps: []saga.Step{{Name: "s", Action: p}}}}})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			inst, err := o.Run(t.Context(), &saga.StartParams{Definition: "f-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			_, log, err := o.Get(t.Context(), inst.ID)
			if err != nil {
				t.Fatal(err)
			}
			if runs != tc.runs || len(log) != 1 || log[0].Outcome != tc.outcome || len(keys) > 1 {
				t.Errorf("runs %d, log %+v; want %d runs, outcome %s", runs, log, tc.runs, tc.outcome)
			}
			if want := map[bool]int64{true: 0, false: 1}[tc.name == "none"]; f.Injected() != want {
				t.Errorf("injected %d, want %d", f.Injected(), want)
			}
			if took := time.Since(start); tc.slow && took < 30*time.Millisecond {
				t.Errorf("slow call took %s, want ≥ 30 ms", took)
			}
		})
	}
	if err := (&fault.Saga{FailRate: 1.5}).Validate(); err == nil {
		t.Error("FailRate 1.5 accepted")
	}
	if (&fault.Saga{}).Enabled() || !(&fault.Saga{SlowRate: 0.01}).Enabled() {
		t.Error("Enabled is wrong")
	}
}
