package saga_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
)

// setSteps is a definition of three LocalTxSet steps a, b, c whose calls each write one
// coupon row named <saga>/<step>/<phase>; step a has a compensation. A call's input
// steers it: "block" makes a's set wait for release, "fail-b" fails b for a business
// reason, "flaky-b" fails b transiently, "set-error" makes a's set fail as a whole. It
// counts the calls of each step's set (and their sizes) and of its one-by-one action.
type setSteps struct {
	release  chan struct{}
	mu       sync.Mutex
	setSizes map[string][]int
	single   atomic.Int64
}

func (s *setSteps) write(ctx context.Context, tx store.Tx, c *saga.Call) error {
	return tx.CouponInsert(ctx, &orderly.Coupon{ID: c.SagaID + "/" + c.StepName + "/" + string(c.Phase), UserID: "u", AmountOff: 1,
		Currency: "EUR", State: orderly.CouponAvailable, CreatedAt: time.Unix(0, 0).UTC()})
}

// outcome is the error a call of step name gets for its input, before it writes.
func outcome(name string, c *saga.Call) error {
	switch {
	case name == "b" && string(c.Input) == `"fail-b"`:
		return saga.Business(errors.New("refused"))
	case name == "b" && string(c.Input) == `"flaky-b"`:
		return errors.New("flaky")
	}
	return nil
}

func (s *setSteps) step(name string, comp bool) saga.Step {
	one := func(ctx context.Context, tx store.Tx, c *saga.Call) error {
		s.single.Add(1)
		if err := outcome(name, c); err != nil {
			return err
		}
		if err := s.write(ctx, tx, c); err != nil {
			return err
		}
		c.Keep(c.SagaID + " after " + name)
		return nil
	}
	set := func(ctx context.Context, tx store.Tx, calls []*saga.Call) ([]error, error) {
		s.mu.Lock()
		s.setSizes[name] = append(s.setSizes[name], len(calls))
		s.mu.Unlock()
		errs := make([]error, len(calls))
		for i, c := range calls {
			switch string(c.Input) {
			case `"block"`:
				<-s.release
			case `"set-error"`:
				return nil, errors.New("the set cannot run")
			}
			if name != "a" && c.Carried() != c.SagaID+" after a" && c.Carried() != c.SagaID+" after b" {
				return nil, fmt.Errorf("call of %s in step %s carries %v", c.SagaID, name, c.Carried())
			}
			if errs[i] = outcome(name, c); errs[i] != nil {
				continue
			}
			if err := s.write(ctx, tx, c); err != nil {
				return nil, err
			}
			c.Keep(c.SagaID + " after " + name)
		}
		return errs, nil
	}
	st := saga.Step{Name: name, Action: saga.LocalTxSet(one, set),
		Retry: saga.RetryPolicy{InitialInterval: time.Hour, MaxInterval: time.Hour, Deadline: 2 * time.Hour}}
	if comp {
		st.Compensation = saga.LocalTx(s.write)
	}
	return st
}

// TestJoinRunsAsSets: joined Runs of a definition whose actions run as sets call each
// step's set once for the sagas still running: eight Runs joined after a blocked one take
// one write transaction; a saga whose second step fails transiently leaves the set there
// and waits for its retry, and the others end succeeded with the value their last action kept
// (Instance.Kept); every saga's log and rows are those of a run one at a time.
func TestJoinRunsAsSets(t *testing.T) {
	t.Parallel()
	s := &setSteps{release: make(chan struct{}), setSizes: map[string][]int{}}
	def := saga.Definition{Name: "sets", Steps: []saga.Step{s.step("a", true), s.step("b", false), s.step("c", false)}}
	db := newStore(t)
	cs := &countingStore{Store: db}
	o, err := saga.New(saga.Config{Store: cs, Definitions: []saga.Definition{def}, JoinRuns: 32, JoinOnlySets: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	type result struct {
		inst *saga.Instance
		err  error
	}
	results := make([]result, 9)
	var wg sync.WaitGroup
	run := func(i int, input string) {
		wg.Go(func() {
			inst, err := o.Run(ctx, &saga.StartParams{Definition: "sets", ID: fmt.Sprintf("s%d", i), Input: json.RawMessage(input)})
			results[i] = result{inst, err}
		})
	}
	run(0, `"block"`)
	for o.JoinWaiting() != 0 || cs.writes.Load() == 0 { // the first batch has begun
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < 9; i++ {
		input := `"ok"`
		if i == 6 {
			input = `"flaky-b"`
		}
		run(i, input)
	}
	for o.JoinWaiting() != 8 {
		time.Sleep(time.Millisecond)
	}
	close(s.release)
	wg.Wait()
	// The blocked saga alone, the eight as a set.
	if got := cs.writes.Load(); got != 2 {
		t.Fatalf("%d write transactions, want 2", got)
	}
	if want := map[string][]int{"a": {1, 8}, "b": {1, 8}, "c": {1, 7}}; fmt.Sprint(s.setSizes) != fmt.Sprint(want) {
		t.Fatalf("set calls %v, want %v", s.setSizes, want)
	}
	if n := s.single.Load(); n != 0 {
		t.Fatalf("%d one-by-one actions, want none", n)
	}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("run %d: %v", i, r.err)
		}
		_, log, err := o.Get(ctx, r.inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		switch i {
		case 6:
			if r.inst.State != saga.StateRunning || r.inst.CurrentStep != 1 || r.inst.WakeAt == nil || r.inst.Kept() != nil {
				t.Fatalf("run 6: %+v, want running at step 1 waiting for its retry", r.inst)
			}
			want = []string{"a/action:succeeded", "b/action:transient"}
			if log[1].RetryAt == nil || !log[1].RetryAt.Equal(r.inst.WakeAt.Truncate(time.Millisecond)) {
				t.Fatalf("run 6: retry_at %v, want the instance's wake_at %v", log[1].RetryAt, r.inst.WakeAt)
			}
		default:
			if r.inst.State != saga.StateSucceeded || r.inst.Kept() != r.inst.ID+" after c" {
				t.Fatalf("run %d: %s kept %v, want succeeded, kept %q", i, r.inst.State, r.inst.Kept(), r.inst.ID+" after c")
			}
			want = []string{"a/action:succeeded", "b/action:succeeded", "c/action:succeeded"}
		}
		if got := summary(log); !slices.Equal(got, want) {
			t.Fatalf("log of run %d: %v, want %v", i, got, want)
		}
		if got, _, err := o.Get(ctx, r.inst.ID); err != nil || got.Version != r.inst.Version || got.State != r.inst.State ||
			got.CurrentStep != r.inst.CurrentStep {
			t.Fatalf("run %d answered %+v, stored %+v (%v)", i, r.inst, got, err)
		}
	}
	var rows []*orderly.Coupon
	if err := db.Read(ctx, func(tx store.Tx) (err error) { rows, err = tx.CouponList(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	// Eight sagas succeeded (three rows each), s6 a.
	if want := 8*3 + 1; len(rows) != want {
		t.Fatalf("%d participant rows, want %d", len(rows), want)
	}
}

// TestJoinRunsSetFails: a set that fails as a whole rolls its transaction back; the batch
// then runs member by member (each in a savepoint, the one-by-one actions), and every saga
// succeeds with its rows written once.
func TestJoinRunsSetFails(t *testing.T) {
	t.Parallel()
	s := &setSteps{release: make(chan struct{}), setSizes: map[string][]int{}}
	close(s.release)
	def := saga.Definition{Name: "sets", Steps: []saga.Step{s.step("a", true), s.step("b", false), s.step("c", false)}}
	db := newStore(t)
	o, err := saga.New(saga.Config{Store: db, Definitions: []saga.Definition{def}, JoinRuns: 32})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := o.Run(t.Context(), &saga.StartParams{Definition: "sets", ID: "one", Input: json.RawMessage(`"set-error"`)})
	if err != nil || inst.State != saga.StateSucceeded {
		t.Fatalf("run: %+v, %v; want succeeded", inst, err)
	}
	if n := s.single.Load(); n != 3 {
		t.Fatalf("%d one-by-one actions, want 3", n)
	}
	var rows []*orderly.Coupon
	if err := db.Read(t.Context(), func(tx store.Tx) (err error) { rows, err = tx.CouponList(t.Context()); return err }); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("%d participant rows, want 3", len(rows))
	}
}

// TestJoinRunsSetCompensates: a saga of a set that must be compensated (a business failure
// after its first step) fails the set: alone, its compensation would have run in its
// transaction, giving back what the sagas behind it may need. The set then runs again
// without it, as a set, and it runs after, in a transaction of its own (JoinOnlySets); the
// other sagas of the set stay in a set (member by member, a set full of checkouts short of
// funds ran one saga at a time: ten times slower on PostgreSQL).
func TestJoinRunsSetCompensates(t *testing.T) {
	t.Parallel()
	s := &setSteps{release: make(chan struct{}), setSizes: map[string][]int{}}
	def := saga.Definition{Name: "sets", Steps: []saga.Step{s.step("a", true), s.step("b", false), s.step("c", false)}}
	db := newStore(t)
	cs := &countingStore{Store: db}
	o, err := saga.New(saga.Config{Store: cs, Definitions: []saga.Definition{def}, JoinRuns: 32, JoinOnlySets: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	insts := make([]*saga.Instance, 4)
	run := func(i int, input string) {
		wg.Go(func() {
			inst, err := o.Run(ctx, &saga.StartParams{Definition: "sets", ID: fmt.Sprintf("s%d", i), Input: json.RawMessage(input)})
			if err != nil {
				t.Errorf("run %d: %v", i, err)
			}
			insts[i] = inst
		})
	}
	run(0, `"block"`)
	for o.JoinWaiting() != 0 || cs.writes.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	run(1, `"fail-b"`)
	run(2, `"ok"`)
	run(3, `"fail-b"`)
	for o.JoinWaiting() != 3 {
		time.Sleep(time.Millisecond)
	}
	close(s.release)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The blocked saga alone; the set of three, rolled back; the set again without s1 and
	// s3; s1 and s3 each in a transaction of its own (member by member in one transaction,
	// they would take rows in arrival order and deadlock with other instances).
	if got := cs.writes.Load(); got != 5 {
		t.Fatalf("%d write transactions, want 5", got)
	}
	if n := s.single.Load(); n != 4 {
		t.Fatalf("%d one-by-one actions, want 4 (a and b of s1 and s3)", n)
	}
	s.mu.Lock()
	sizes := fmt.Sprint(s.setSizes)
	s.mu.Unlock()
	if want := fmt.Sprint(map[string][]int{"a": {1, 3, 1}, "b": {1, 3, 1}, "c": {1, 1, 1}}); sizes != want {
		t.Fatalf("set calls %v, want %v (s0; s1, s2 and s3, s1 and s3 failing b; s2 again)", sizes, want)
	}
	if insts[1].State != saga.StateCompensated || insts[2].State != saga.StateSucceeded || insts[3].State != saga.StateCompensated {
		t.Fatalf("s1 %s, s2 %s, s3 %s; want compensated, succeeded, compensated", insts[1].State, insts[2].State, insts[3].State)
	}
	_, log, err := o.Get(ctx, "s1")
	if want := []string{"a/action:succeeded", "b/action:business_failure", "a/compensation:succeeded"}; err != nil || !slices.Equal(summary(log), want) {
		t.Fatalf("log of s1: %v (%v), want %v", summary(log), err, want)
	}
}
