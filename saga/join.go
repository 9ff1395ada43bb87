package saga

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/orderlyhq/orderly"

	"github.com/orderlyhq/orderly/internal/batchctx"
	"github.com/orderlyhq/orderly/store"
)

// runJoiner joins concurrent starts of sagas whose first step is a LocalTx into one
// transaction (group commit, Config.JoinRuns), one commit for all: as sets (runSet) for a
// definition whose actions run as sets, else each saga's first run of local steps
// (runLocal) in a savepoint of its own (runSavepoints). Up to lanes goroutines run the
// batches while starts wait; each batch takes up to max waiting starts in arrival order.
type runJoiner struct {
	o     *Orchestrator
	max   int
	lanes int // batches run at once
	mu    sync.Mutex
	// waiting are the starts not in a batch yet; running counts the goroutines running
	// batches (at most lanes).
	waiting []*joinedRun
	running int
}

// joinedRun is one start waiting for (or in) a batch.
type joinedRun struct {
	ctx  context.Context
	tmpl *store.SagaInstance
	def  *Definition
	done chan struct{} // closed when records and err are set

	records []record
	err     error
}

// start runs tmpl's first run of local steps in a batch and returns what startInTx
// returns. An error (the batch's transaction failed, or this member's savepoint: its id
// was taken) means nothing of this saga committed. When ctx ends before the start joined
// a batch, it returns ctx's error at once.
func (j *runJoiner) start(ctx context.Context, tmpl *store.SagaInstance, def *Definition) (*store.SagaInstance, bool, any, error) {
	m := &joinedRun{ctx: ctx, tmpl: tmpl, def: def, done: make(chan struct{})}
	j.mu.Lock()
	j.waiting = append(j.waiting, m)
	if j.running < j.lanes {
		j.running++
		go j.loop()
	}
	j.mu.Unlock()
	select {
	case <-m.done:
	case <-ctx.Done():
		j.mu.Lock()
		if i := slices.Index(j.waiting, m); i >= 0 {
			j.waiting = slices.Delete(j.waiting, i, i+1)
			j.mu.Unlock()
			return nil, false, nil, ctx.Err()
		}
		j.mu.Unlock()
		<-m.done
	}
	if m.err != nil {
		return nil, false, nil, m.err
	}
	last := m.records[len(m.records)-1]
	return last.next, last.claimed, last.kept, nil
}

// loop runs batches until none waits.
func (j *runJoiner) loop() {
	for {
		j.mu.Lock()
		if len(j.waiting) == 0 {
			j.running--
			j.mu.Unlock()
			return
		}
		n := min(len(j.waiting), j.max)
		batch := slices.Clone(j.waiting[:n])
		j.waiting = slices.Delete(j.waiting, 0, n)
		j.mu.Unlock()
		j.run(batch)
		for _, m := range batch {
			close(m.done)
		}
	}
}

// run writes batch and sets each member's outcome; after each commit it does what
// follows each member's records (metrics, logs, wake-ups). The members of a definition
// whose first action runs as a set (LocalTxSet) run as sets (runSet); the others, and
// those whose set transaction failed, run in one transaction with a savepoint each
// (runSavepoints).
// A member whose context ended before the batch began is answered with its context's
// error and left out: its deadline, already past, would otherwise end the batch's
// transaction and send every member the ordinary way.
func (j *runJoiner) run(batch []*joinedRun) {
	var (
		defs []*Definition
		sets = map[*Definition][]*joinedRun{}
		rest []*joinedRun
	)
	for _, m := range batch {
		if err := m.ctx.Err(); err != nil {
			m.err = err
			continue
		}
		if _, phase, p := current(&store.SagaInstance{State: string(StateRunning)}, m.def); phase == PhaseAction && setOf(p) != nil {
			if sets[m.def] == nil {
				defs = append(defs, m.def)
			}
			sets[m.def] = append(sets[m.def], m)
			continue
		}
		rest = append(rest, m)
	}
	for _, def := range defs {
		members := sets[def]
		for round := 1; ; round++ {
			err := j.runSet(def, members)
			if err == nil {
				break
			}
			var comp *setCompensatesError
			if errors.As(err, &comp) && round < maxSetRounds && len(comp.members) < len(members) {
				// The set again without the sagas that must be compensated, which run after
				// it, one by one: what they would have given back is the set's to use.
				rest = append(rest, comp.members...)
				members = slices.DeleteFunc(members, func(m *joinedRun) bool { return slices.Contains(comp.members, m) })
				continue
			}
			j.o.cfg.Logger.Debug("saga: a set run failed; its sagas run one by one", "definition", def.Name, "sagas", len(members), "error", err)
			rest = append(rest, members...)
			break
		}
	}
	switch {
	case len(rest) == 0:
	case j.o.cfg.JoinOnlySets:
		// PostgreSQL and MySQL: one transaction per saga, concurrently, in the callers'
		// goroutines (Run). Member by member in one transaction, the sagas would take their
		// rows in arrival order, not in one order (stock by SKU), and deadlock with the
		// transactions of other instances, each deadlock costing the database's detection
		// time (1 s by default on PostgreSQL) with the lane held.
		for _, m := range rest {
			m.records, m.err = m.records[:0], errRunAlone
		}
	default:
		j.runSavepoints(rest)
	}
}

// errRunAlone: the start left its batch (Config.JoinOnlySets: it does not run as a set, or
// its set could not run); Run starts it in a transaction of its own.
var errRunAlone = errors.New("saga: the start runs in a transaction of its own")

// maxSetRounds bounds the runs of one set: each run after the first leaves out the sagas
// that the previous one found must be compensated (setCompensatesError). Leaving members
// out only frees stock, coupons and funds for the others, so a second run rarely finds
// more; past the bound the whole set runs member by member.
const maxSetRounds = 3

// batchContext is the context of a batch's transaction (batchctx.Batch of the members').
func batchContext(batch []*joinedRun) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(batch))
	for i, m := range batch {
		ctxs[i] = m.ctx
	}
	return batchctx.Batch(ctxs)
}

// runSet runs batch, new sagas of def, in one transaction as sets: from the first step on,
// while the steps' actions run as sets, each step's SetFunc is called once for the sagas
// still running, and each saga's outcome is recorded as runLocal records it; a saga that
// failed its step transiently, or whose next step does not run as a set, leaves the run
// there (its record claims what follows, which its caller drives after the commit, as
// after any run of local steps). Sagas that must be compensated (a business failure after
// their first step) fail the set with a *setCompensatesError naming them: alone, their
// compensations would have given back, in this transaction, what the sagas behind them
// may need (run sets the others again without them). The instances and the step log are
// written at the end, in multi-row statements. On error nothing of it committed and no
// member's outcome is set.
func (j *runJoiner) runSet(def *Definition, batch []*joinedRun) error {
	o := j.o
	ctx, cancel := batchContext(batch)
	defer cancel()
	err := j.inTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		cur := make([]*store.SagaInstance, len(batch))
		carried := make([]any, len(batch))
		live := make([]int, len(batch))
		for i, m := range batch { // a run again (a deadlock, a busy database) starts from scratch
			m.records, m.err = m.records[:0], nil
			cur[i], live[i] = o.claimNew(m.tmpl, def, now), i
		}
		var logRows []*store.SagaStep
		for len(live) > 0 {
			step, phase, p := current(cur[live[0]], def)
			set := setOf(p)
			if phase != PhaseAction || set == nil {
				break
			}
			calls := make([]*Call, len(live))
			for k, i := range live {
				calls[k] = newCall(cur[i], step, phase)
				calls[k].carried = carried[i]
			}
			attemptCtx, cancel := context.WithTimeout(ctx, step.timeout())
			errs, err := set(attemptCtx, tx, calls)
			if err == nil && len(errs) != len(calls) {
				err = fmt.Errorf("saga %s step %s: the set answered %d of %d calls", def.Name, step.Name, len(errs), len(calls))
			}
			for k := range errs {
				if err == nil {
					errs[k] = callError(attemptCtx, step, errs[k])
				}
			}
			cancel()
			if err != nil {
				return err
			}
			if now, err = tx.Now(ctx); err != nil {
				return err
			}
			next := live[:0:0]
			for k, i := range live {
				out, msg := outcomeOf(errs[k])
				n := clone(cur[i])
				claimed, logged := o.advance(n, def, out, msg, now)
				logRows = append(logRows, o.logRow(cur[i], n, claimed, def, logged, msg, now))
				if calls[k].kept != nil {
					carried[i] = calls[k].kept
				}
				batch[i].records = append(batch[i].records, record{cur[i], n, claimed, logged, carried[i]})
				cur[i] = n
				if claimed && State(n.State) == StateRunning {
					next = append(next, i)
				}
			}
			live = next
		}
		if len(batch[0].records) == 0 {
			return errNotLocal
		}
		var compensating []*joinedRun
		for _, m := range batch {
			if last := m.records[len(m.records)-1]; State(last.next.State) == StateCompensating {
				// Alone, its compensations would run in this transaction, before the steps of the
				// sagas behind it (its stock or coupon back for them): the set runs again
				// without it, and it runs after, compensated in a savepoint of its own.
				compensating = append(compensating, m)
			}
		}
		if len(compensating) > 0 {
			return &setCompensatesError{members: compensating}
		}
		if err := tx.SagaInsertMany(ctx, cur); err != nil {
			if orderly.ErrorCode(err) == orderly.ECONFLICT {
				return fmt.Errorf("%w: %w", errTaken, err)
			}
			return err
		}
		return tx.SagaStepInsert(ctx, logRows...)
	})
	if err != nil {
		for _, m := range batch {
			m.records, m.err = m.records[:0], nil
		}
		return err
	}
	for _, m := range batch {
		for _, r := range m.records {
			o.recorded(m.ctx, r.prev, r.next, r.claimed, r.logged)
		}
	}
	return nil
}

// setCompensatesError: sagas of a set failed a step after their first and must be
// compensated; run runs the set again without them, and them after it (runSavepoints).
type setCompensatesError struct{ members []*joinedRun }

func (e *setCompensatesError) Error() string {
	return fmt.Sprintf("saga: %d sagas of the set must be compensated; the set runs again without them", len(e.members))
}

// runSavepoints writes batch in one transaction, each member's first run of local steps
// (runLocal) in a savepoint of its own, and sets each member's outcome.
func (j *runJoiner) runSavepoints(batch []*joinedRun) {
	o := j.o
	ctx, cancel := batchContext(batch)
	defer cancel()
	err := j.inTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		for _, m := range batch { // a run again (a deadlock, a busy database) starts from scratch
			m.records, m.err = m.records[:0], nil
			mctx := batchctx.Member(ctx, m.ctx) // the member's trace span and logger
			m.err = tx.Savepoint(ctx, func() error {
				var err error
				m.records, err = o.runLocal(mctx, tx, o.claimNew(m.tmpl, m.def, now), m.def, m.records[:0], true)
				return err
			})
			if m.err == nil && len(m.records) == 0 {
				m.err = errNotLocal
			}
		}
		return nil
	})
	for _, m := range batch {
		if err != nil {
			m.err = err
			continue
		}
		if m.err == nil {
			for _, r := range m.records {
				o.recorded(m.ctx, r.prev, r.next, r.claimed, r.logged)
			}
		}
	}
}

// inTx runs fn in a write transaction. A participant that panics does so in this
// goroutine, not in its caller's, where an HTTP server's recovery would catch it: the panic
// becomes the batch's error (the store rolled the transaction back), and each member then
// runs the ordinary way in its caller's goroutine.
func (j *runJoiner) inTx(ctx context.Context, fn func(tx store.Tx) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("saga: a participant panicked in a joined transaction: %v", r)
			j.o.cfg.Logger.ErrorContext(ctx, "saga: a participant panicked in a joined transaction; its members run one by one", "panic", r)
		}
	}()
	return j.o.cfg.Store.InTx(ctx, fn)
}
