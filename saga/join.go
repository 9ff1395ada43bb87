package saga

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/orderlyhq/orderly/internal/batchctx"
	"github.com/orderlyhq/orderly/store"
)

// runJoiner joins concurrent starts of sagas whose first step is a LocalTx into one
// transaction (group commit, Config.JoinRuns), one commit for all: each saga's first run
// of local steps (runLocal) in a savepoint of its own. Up to lanes goroutines run the
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

// run writes batch in one transaction, each member's first run of local steps (runLocal)
// in a savepoint of its own, and sets each member's outcome; after the commit it does what
// follows each member's records (metrics, logs, wake-ups).
// A member whose context ended before the batch began is answered with its context's
// error and left out: its deadline, already past, would otherwise end the batch's
// transaction and send every member the ordinary way.
func (j *runJoiner) run(batch []*joinedRun) {
	live := batch[:0:0]
	for _, m := range batch {
		if m.err = m.ctx.Err(); m.err == nil {
			live = append(live, m)
		}
	}
	if len(live) == 0 {
		return
	}
	batch = live
	o := j.o
	ctx, cancel := batchctx.Batch(batch, func(m *joinedRun) context.Context { return m.ctx })
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
