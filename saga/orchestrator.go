package saga

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Config configures an Orchestrator. Zero values mean the documented defaults.
type Config struct {
	// Store holds the instances and the step log. Required.
	Store store.Store
	// Definitions are the sagas this orchestrator runs, by name (unique).
	Definitions []Definition
	// Workers is the number of goroutines that run claimed attempts (from Begin and from
	// the timer through Timed); 8.
	Workers int
	// QueueSize bounds the attempts claimed and waiting for a worker; the timer claims no
	// more than the free room. 4096.
	QueueSize int
	// LeaseMargin is added to a step's Timeout to make the lease of an attempt: a runner
	// that crashed leaves a step that is due again LeaseMargin after its attempt's timeout.
	// 2 s.
	LeaseMargin time.Duration
	// Signals is told when a saga waits until a time (a retry, or now for a redriven
	// saga): the one timer re-arms. nil drops it: the sweep finds the saga.
	Signals orderly.Signals
	// JoinRuns, when above 1, joins concurrent Run calls of sagas whose first step is a
	// LocalTx, up to JoinRuns, into one transaction (group commit), one commit for all, each
	// saga's first run of local steps in a savepoint of its own: for a store with one writer
	// (SQLite), which runs transactions one after another anyway. 0: every Run has its own
	// transaction.
	JoinRuns int
	// JoinLanes is how many joined transactions (JoinRuns) run at once; 1. Concurrent
	// batches may take rows in different orders (a batch takes them in arrival order): the
	// database's deadlock detection and the store's retry resolve it, at the cost of a run
	// again.
	JoinLanes int
	// Wrap, when set, decorates every action and compensation of Definitions (Around):
	// tracing, or a test kit's fault injection. nil: none.
	Wrap    func(Participant) Participant
	Metrics *telemetry.Metrics
	Logger  *slog.Logger
}

// Orchestrator runs the sagas of its definitions. Run and Begin start instances; Timed
// (closer.Timed) hands the due ones to its workers; Redrive resumes a stuck one.
type Orchestrator struct {
	cfg  Config
	defs map[string]*Definition

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
	queue  chan work

	joiner *runJoiner // Config.JoinRuns; nil without
}

// work is one claimed attempt for a worker: s as claimed. confirm is set when the claim's
// transaction may not have committed yet (the closer's transaction of Timed.FireDue).
type work struct {
	s       *store.SagaInstance
	confirm bool
}

// New returns an orchestrator; it returns an error for an invalid or duplicate definition.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Store == nil {
		return nil, errors.New("saga: Config.Store is required")
	}
	cfg.Workers = cmp.Or(cfg.Workers, 8)
	cfg.QueueSize = cmp.Or(cfg.QueueSize, 4096)
	cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, 2*time.Second)
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	o := &Orchestrator{cfg: cfg, defs: map[string]*Definition{}}
	if cfg.JoinRuns > 1 {
		o.joiner = &runJoiner{o: o, max: cfg.JoinRuns, lanes: max(cfg.JoinLanes, 1)}
	}
	if err := o.Define(cfg.Definitions...); err != nil {
		return nil, err
	}
	return o, nil
}

// Define adds definitions to those of Config.Definitions, for the services built on the
// orchestrator (a feature's sagas). Call it before Start and before any instance runs: the
// definitions are read without a lock. It returns an error for an invalid or duplicate
// definition.
func (o *Orchestrator) Define(defs ...Definition) error {
	defs = slices.Clone(defs) // Wrap replaces steps: the caller's stay as given
	for i := range defs {
		d := &defs[i]
		if o.cfg.Wrap != nil {
			d.Steps = slices.Clone(d.Steps)
			for j := range d.Steps {
				st := &d.Steps[j]
				if st.Action != nil {
					st.Action = o.cfg.Wrap(st.Action)
				}
				if st.Compensation != nil {
					st.Compensation = o.cfg.Wrap(st.Compensation)
				}
			}
		}
		if err := d.validate(); err != nil {
			return err
		}
		if o.defs[d.Name] != nil {
			return fmt.Errorf("saga definition %s: registered twice", d.Name)
		}
		o.defs[d.Name] = d
	}
	return nil
}

// Start runs the workers until ctx ends or Stop is called; it returns an error when already
// started. Without them, Begin fails and Timed claims nothing (Run works either way).
func (o *Orchestrator) Start(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cancel != nil {
		return errors.New("saga: orchestrator already started")
	}
	ctx, o.cancel = context.WithCancel(ctx)
	o.queue = make(chan work, o.cfg.QueueSize)
	for range o.cfg.Workers {
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			o.work(ctx, o.queue)
		}()
	}
	return nil
}

// Stop stops the workers and waits for the attempts in flight; claimed attempts not run
// yet become due again when their leases end. It is idempotent.
func (o *Orchestrator) Stop() {
	o.mu.Lock()
	cancel := o.cancel
	o.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	o.wg.Wait()
	o.mu.Lock()
	o.queue = nil // Timed claims nothing more; Begin fails
	o.mu.Unlock()
}

func (o *Orchestrator) work(ctx context.Context, queue <-chan work) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-queue:
			s := w.s
			if w.confirm {
				var err error
				if s, err = o.confirm(ctx, s); err != nil || s == nil {
					if err != nil && ctx.Err() == nil {
						o.cfg.Logger.Warn("saga: confirm claim", "saga_id", w.s.ID, "error", err)
					}
					continue
				}
			}
			if _, err := o.drive(ctx, s); err != nil && ctx.Err() == nil {
				o.cfg.Logger.Warn("saga: attempt not recorded; it is due again when its lease ends", "saga_id", s.ID, "error", err)
			}
		}
	}
}

// confirm waits until the transaction that claimed s has ended (it locks the row) and
// returns s when the claim committed; nil when it did not (another claim will come).
func (o *Orchestrator) confirm(ctx context.Context, s *store.SagaInstance) (*store.SagaInstance, error) {
	var cur *store.SagaInstance
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		var err error
		cur, err = tx.SagaLock(ctx, s.ID)
		return err
	})
	if err != nil || cur.Version != s.Version {
		return nil, err
	}
	return cur, nil
}

// StartParams starts a saga.
type StartParams struct {
	// Definition names a registered definition. Required.
	Definition string
	// ID is the instance id; a new UUIDv7 when empty. An id that exists is ECONFLICT.
	ID string
	// Input is given to every call (Call.Input); JSON null when empty.
	Input json.RawMessage
}

// Run starts a saga and runs it in the caller's goroutine until it ends or waits for a
// retry (then the timer resumes it); it returns the instance as it was left. When the
// first step's participant is a LocalTx, the instance is written in the transaction of
// that first run of local steps (one transaction for a saga whose steps are all local);
// when that transaction fails, Run starts the saga again the ordinary way (the start in a
// transaction of its own, then the steps), as nothing of the first try committed. With
// Config.JoinRuns, that transaction is shared with concurrent Runs (join.go). Errors:
// EINVALID for an unknown definition or input that is not JSON, ECONFLICT for a taken id,
// and database errors (an attempt whose outcome could not be recorded is due again when
// its lease ends).
func (o *Orchestrator) Run(ctx context.Context, p *StartParams) (*Instance, error) {
	def, s, err := o.prepare(p)
	if err != nil {
		return nil, err
	}
	if _, _, first := current(s, def); first.inTx() {
		var (
			next    *store.SagaInstance
			claimed bool
			kept    any
		)
		if o.joiner != nil {
			next, claimed, kept, err = o.joiner.start(ctx, s, def)
		} else {
			next, claimed, kept, err = o.startInTx(ctx, s, def)
		}
		if err == nil && claimed {
			// The local steps are done and the next one (a call outside the database) is
			// claimed by this caller: run on, as the ordinary path does.
			if next, err = o.drive(ctx, next); err != nil {
				return nil, err
			}
			kept = nil
		}
		if err == nil {
			inst := newInstance(next)
			if State(next.State) == StateSucceeded {
				inst.kept = kept
			}
			return inst, nil
		}
		if orderly.ErrorCode(err) == orderly.ECONFLICT && errors.Is(err, errTaken) {
			return nil, err
		}
		o.cfg.Logger.DebugContext(ctx, "saga: the one-transaction start failed; starting it the ordinary way", "saga_id", s.ID, "error", err)
	}
	s, err = o.insert(ctx, s, def)
	if err != nil {
		return nil, err
	}
	s, err = o.drive(ctx, s)
	if err != nil {
		return nil, err
	}
	return newInstance(s), nil
}

// Started is a saga written by StartInTx, its first attempt claimed by the caller. Run it
// with Drive once the transaction that wrote it has committed.
type Started struct{ s *store.SagaInstance }

// ID is the instance id.
func (st *Started) ID() string { return st.s.ID }

// StartInTx writes a new instance of p in tx, the caller's transaction, running with its
// first attempt claimed by the caller; now is tx's database clock (tx.Now). The saga
// exists exactly when the work that needs it does: a state change and the saga that must
// follow it commit together, and neither without the other. After the commit, Drive runs
// it; when the caller dies first, the timer claims it once the attempt's lease (the first
// step's timeout + Config.LeaseMargin) has ended. Errors: EINVALID for an unknown
// definition or input that is not JSON, ECONFLICT for a taken id, database errors (tx
// must then roll back).
func (o *Orchestrator) StartInTx(ctx context.Context, tx store.Tx, now time.Time, p *StartParams) (*Started, error) {
	def, s, err := o.prepare(p)
	if err != nil {
		return nil, err
	}
	if s, err = o.start(ctx, tx, s, def, now); err != nil {
		return nil, fmt.Errorf("start saga %s: %w", p.ID, err)
	}
	return &Started{s: s}, nil
}

// Drive runs a saga written by StartInTx, after its transaction committed, in the
// caller's goroutine until it ends or waits for a retry (then the timer resumes it), as
// Run does; it returns the instance as it was left. Errors: database errors (an attempt
// whose outcome could not be recorded is due again when its lease ends).
func (o *Orchestrator) Drive(ctx context.Context, st *Started) (*Instance, error) {
	s, err := o.drive(ctx, st.s)
	if err != nil {
		return nil, err
	}
	return newInstance(s), nil
}

// Begin starts a saga and hands its first attempt to a worker; it returns the instance as
// created (running, first step claimed). Errors as Run, and an error when the orchestrator
// is not started.
func (o *Orchestrator) Begin(ctx context.Context, p *StartParams) (*Instance, error) {
	o.mu.Lock()
	queue := o.queue
	o.mu.Unlock()
	if queue == nil {
		return nil, errors.New("saga: orchestrator not started")
	}
	s, err := o.create(ctx, p)
	if err != nil {
		return nil, err
	}
	select {
	case queue <- work{s: s}:
	default:
		o.cfg.Logger.Warn("saga: worker queue full; the saga starts when its lease ends", "saga_id", s.ID)
	}
	return newInstance(s), nil
}

// create writes a running instance with its first attempt claimed by the caller.
func (o *Orchestrator) create(ctx context.Context, p *StartParams) (*store.SagaInstance, error) {
	def, s, err := o.prepare(p)
	if err != nil {
		return nil, err
	}
	return o.insert(ctx, s, def)
}

// prepare checks p and returns its definition and the instance to write (its times and
// claim are set when it is written).
func (o *Orchestrator) prepare(p *StartParams) (*Definition, *store.SagaInstance, error) {
	def := o.defs[p.Definition]
	if def == nil {
		return nil, nil, orderly.Errorf(orderly.EINVALID, "unknown saga definition %q", p.Definition)
	}
	input := p.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	} else if !json.Valid(input) {
		return nil, nil, orderly.Errorf(orderly.EINVALID, "saga input is not JSON")
	}
	id := p.ID
	if id == "" {
		var err error
		if id, err = order.NewID(); err != nil {
			return nil, nil, err
		}
	}
	return def, &store.SagaInstance{ID: id, Definition: def.Name, State: string(StateRunning), Input: input}, nil
}

// errTaken marks the ECONFLICT of an instance id that exists.
var errTaken = errors.New("saga id taken")

// errNotLocal: a run of local steps found no LocalTx participant to run.
var errNotLocal = errors.New("saga: the first step is not a LocalTx participant")

// start sets the times of tmpl, a new instance, to now, claims its first attempt and
// writes it in tx.
func (o *Orchestrator) start(ctx context.Context, tx store.Tx, tmpl *store.SagaInstance, def *Definition, now time.Time) (*store.SagaInstance, error) {
	s := o.claimNew(tmpl, def, now)
	if err := insertInstance(ctx, tx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// claimNew returns tmpl, a new instance, with its times set to now and its first attempt
// claimed, not written.
func (o *Orchestrator) claimNew(tmpl *store.SagaInstance, def *Definition, now time.Time) *store.SagaInstance {
	s := clone(tmpl)
	s.CreatedAt, s.UpdatedAt = now, now
	o.claim(s, def, now)
	return s
}

// insertInstance writes s, a new instance; its id taken is errTaken (ECONFLICT).
func insertInstance(ctx context.Context, tx store.Tx, s *store.SagaInstance) error {
	if err := tx.SagaInsert(ctx, s); err != nil {
		if orderly.ErrorCode(err) == orderly.ECONFLICT {
			return fmt.Errorf("%w: %w", errTaken, err)
		}
		return err
	}
	return nil
}

// insert writes tmpl, a new instance, running with its first attempt claimed, in a
// transaction of its own.
func (o *Orchestrator) insert(ctx context.Context, tmpl *store.SagaInstance, def *Definition) (*store.SagaInstance, error) {
	var s *store.SagaInstance
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		s, err = o.start(ctx, tx, tmpl, def, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start saga %s: %w", tmpl.ID, err)
	}
	return s, nil
}

// startInTx writes tmpl, a new instance whose first participant is a LocalTx, and runs
// its first run of local steps, in one transaction (runLocal: the instance is written
// once, as the run leaves it); it returns the instance as
// last recorded, and whether its next attempt is claimed by the caller (to run on).
func (o *Orchestrator) startInTx(ctx context.Context, tmpl *store.SagaInstance, def *Definition) (*store.SagaInstance, bool, any, error) {
	var records []record
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		records, err = o.runLocal(ctx, tx, o.claimNew(tmpl, def, now), def, records[:0], true)
		return err
	})
	if err != nil {
		return nil, false, nil, fmt.Errorf("start saga %s: %w", tmpl.ID, err)
	}
	for _, r := range records {
		o.recorded(ctx, r.prev, r.next, r.claimed, r.logged)
	}
	last := records[len(records)-1]
	return last.next, last.claimed, last.kept, nil
}

// errFenced: the instance changed since it was claimed (another runner took it over).
var errFenced = errors.New("saga: claim taken over")

// drive runs the claimed attempt of s, and each next attempt that its recording claims,
// until the saga ends, waits for a retry or was taken over; it returns the instance as
// last recorded.
func (o *Orchestrator) drive(ctx context.Context, s *store.SagaInstance) (*store.SagaInstance, error) {
	def := o.defs[s.Definition]
	if def == nil {
		return s, fmt.Errorf("saga %s: definition %q is not registered here", s.ID, s.Definition)
	}
	for {
		step, phase, p := current(s, def)
		var (
			next    *store.SagaInstance
			claimed bool
			err     error
		)
		if p.inTx() {
			next, claimed, err = o.runInTx(ctx, s, def)
		} else {
			attemptCtx, cancel := context.WithTimeout(ctx, step.timeout())
			callErr := p.call(attemptCtx, nil, newCall(s, step, phase))
			callErr = callError(attemptCtx, step, callErr)
			cancel()
			next, claimed, err = o.record(ctx, s, def, callErr)
		}
		if errors.Is(err, errFenced) {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		if !claimed {
			return next, nil
		}
		s = next
	}
}

// current returns the step of s's claimed attempt, its phase and its participant.
func current(s *store.SagaInstance, def *Definition) (*Step, Phase, Participant) {
	step := &def.Steps[s.CurrentStep]
	if State(s.State) == StateCompensating {
		return step, PhaseCompensation, step.Compensation
	}
	return step, PhaseAction, step.Action
}

func newCall(s *store.SagaInstance, step *Step, phase Phase) *Call {
	return &Call{SagaID: s.ID, Definition: s.Definition, Step: s.CurrentStep, StepName: step.Name, Phase: phase,
		Attempt: s.Attempts, Input: s.Input, IdempotencyKey: IdempotencyKey(s.ID, step.Name, phase)}
}

// callError adds the attempt's timeout to an error caused by it.
func callError(attemptCtx context.Context, step *Step, err error) error {
	if err != nil && errors.Is(attemptCtx.Err(), context.DeadlineExceeded) && !IsBusiness(err) {
		return fmt.Errorf("attempt timed out after %s: %w", step.timeout(), err)
	}
	return err
}

// outcomeOf classifies a participant's error.
func outcomeOf(err error) (Outcome, string) {
	switch {
	case err == nil:
		return OutcomeSucceeded, ""
	case IsBusiness(err):
		return OutcomeBusinessFailure, err.Error()
	default:
		return OutcomeTransient, err.Error()
	}
}

// record is one attempt recorded in a run of local steps: the instance before and after.
type record struct {
	prev, next *store.SagaInstance
	claimed    bool
	logged     Outcome
	kept       any // Call.Keep of the run's actions so far, after this attempt
}

// runInTx runs s's claimed attempt, a LocalTx participant, in one transaction with its
// record, and goes on in the same transaction with each next attempt claimed at once whose
// participant is a LocalTx too (runLocal).
func (o *Orchestrator) runInTx(ctx context.Context, s *store.SagaInstance, def *Definition) (*store.SagaInstance, bool, error) {
	var records []record
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		var err error
		records, err = o.runLocal(ctx, tx, s, def, records[:0], false)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	for _, r := range records {
		o.recorded(ctx, r.prev, r.next, r.claimed, r.logged)
	}
	if len(records) == 0 {
		return s, false, fmt.Errorf("saga %s: step %d is not a LocalTx participant", s.ID, s.CurrentStep)
	}
	last := records[len(records)-1]
	return last.next, last.claimed, nil
}

// runLocal runs s's claimed attempt, a LocalTx participant, in tx, records it, and goes on
// with each next attempt claimed at once whose participant is a LocalTx too (a run of
// local steps, or of their compensations, commits once); it appends the records to
// records. Each participant runs in a savepoint: its error rolls back its own writes only,
// and its failure is recorded like any other. Every attempt gets its log row. The
// instance row is written by the guarded update of the first record (the fence: errFenced,
// and nothing commits, when another runner took it over; the row then stays locked to the
// commit) and by that of the last one: the states between are seen by no one else.
// fresh says that s is a new instance, claimed and not written yet: no fence, and the run
// inserts it once, in the state it leaves it in.
//
// The log rows are written in one statement (SagaStepInsert of several), before the
// run's first compensation is called (a compensation may read the log: which action
// failed, and how) and at the end of the run: an action does not read the rows of the
// actions before it in its run, nor, in a fresh instance's first run, the instance row.
func (o *Orchestrator) runLocal(ctx context.Context, tx store.Tx, s *store.SagaInstance, def *Definition, records []record, fresh bool) ([]record, error) {
	var (
		written *store.SagaInstance // the state the row holds, when written in this run
		logRows []*store.SagaStep   // not written yet
		carried any                 // Call.Keep of the run's actions so far
	)
	fence := !fresh
	// flush writes the log rows, after the instance row when it is new (cur: its state).
	flush := func(cur *store.SagaInstance) error {
		if fresh {
			if err := insertInstance(ctx, tx, cur); err != nil {
				return err
			}
			fresh, written = false, cur
		}
		err := tx.SagaStepInsert(ctx, logRows...)
		logRows = logRows[:0]
		return err
	}
	for cur := s; ; {
		step, phase, p := current(cur, def)
		if !p.inTx() {
			break
		}
		if phase == PhaseCompensation && len(logRows) > 0 {
			if err := flush(cur); err != nil {
				return records, err
			}
		}
		attemptCtx, cancel := context.WithTimeout(ctx, step.timeout())
		call := newCall(cur, step, phase)
		if phase == PhaseAction {
			call.carried = carried
		}
		callErr := tx.Savepoint(ctx, func() error { return p.call(attemptCtx, tx, call) })
		callErr = callError(attemptCtx, step, callErr)
		cancel()
		switch {
		case callErr != nil || phase != PhaseAction:
			carried = nil
		case call.kept != nil:
			carried = call.kept
		}
		out, msg := outcomeOf(callErr)
		now, err := tx.Now(ctx)
		if err != nil {
			return records, err
		}
		next := clone(cur)
		claimed, logged := o.advance(next, def, out, msg, now)
		if fence {
			if ok, err := tx.SagaUpdate(ctx, next); err != nil {
				return records, err
			} else if !ok {
				return records, errFenced
			}
			fence, written = false, next
		}
		logRows = append(logRows, o.logRow(cur, next, claimed, def, logged, msg, now))
		records = append(records, record{cur, next, claimed, logged, carried})
		if !claimed {
			break
		}
		cur = next
	}
	if len(records) == 0 {
		return records, nil
	}
	last := records[len(records)-1].next
	if err := flush(last); err != nil {
		return records, err
	}
	if last != written {
		if ok, err := tx.SagaUpdate(ctx, last); err != nil {
			return records, err
		} else if !ok {
			return records, fmt.Errorf("saga %s: its row changed within the transaction that holds it", s.ID)
		}
	}
	return records, nil
}

// record writes the outcome of s's claimed attempt (callErr decides it) and what follows,
// guarded by s's version: errFenced when another runner took it over.
func (o *Orchestrator) record(ctx context.Context, s *store.SagaInstance, def *Definition, callErr error) (*store.SagaInstance, bool, error) {
	out, msg := outcomeOf(callErr)
	var (
		next    *store.SagaInstance
		claimed bool
		logged  Outcome
	)
	err := o.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		next = clone(s)
		claimed, logged = o.advance(next, def, out, msg, now)
		ok, err := tx.SagaUpdate(ctx, next)
		if err != nil {
			return err
		} else if !ok {
			return errFenced
		}
		return tx.SagaStepInsert(ctx, o.logRow(s, next, claimed, def, logged, msg, now))
	})
	if err != nil {
		return nil, false, err
	}
	o.recorded(ctx, s, next, claimed, logged)
	return next, claimed, nil
}

// recorded does what follows a committed record: metrics, logs, and a wake-up of the
// timer for a retry.
func (o *Orchestrator) recorded(ctx context.Context, prev, next *store.SagaInstance, claimed bool, logged Outcome) {
	phase := PhaseAction
	if State(prev.State) == StateCompensating {
		phase = PhaseCompensation
	}
	o.cfg.Metrics.SagaAttempts.WithLabelValues(string(phase), string(logged)).Inc()
	switch State(next.State) {
	case StateSucceeded, StateCompensated:
		o.cfg.Metrics.SagasEnded.WithLabelValues(next.State).Inc()
	case StateStuck:
		o.cfg.Metrics.SagasStuck.Inc()
		o.cfg.Logger.ErrorContext(ctx, "saga stuck: a compensation failed its last attempt; re-drive it when the participant is fixed",
			"saga_id", next.ID, "definition", next.Definition, "step", next.CurrentStep, "attempts", next.Attempts, "error", next.LastError)
	default:
		if State(prev.State) == StateRunning && State(next.State) == StateCompensating {
			o.cfg.Logger.InfoContext(ctx, "saga compensating", "saga_id", next.ID, "definition", next.Definition,
				"failed_step", prev.CurrentStep, "outcome", string(logged), "error", next.LastError)
		}
		if !claimed && next.WakeAt != nil {
			o.cfg.Signals.Deadline(ctx, *next.WakeAt)
		}
	}
}

// logRow is the step log row of s's claimed attempt, ended at now, with next the instance
// as it follows (claimed: its next attempt runs at once).
func (o *Orchestrator) logRow(s, next *store.SagaInstance, claimed bool, def *Definition, out Outcome, msg string, now time.Time) *store.SagaStep {
	phase := PhaseAction
	if State(s.State) == StateCompensating {
		phase = PhaseCompensation
	}
	name := def.Steps[s.CurrentStep].Name
	started := now
	if s.AttemptStartedAt != nil {
		started = *s.AttemptStartedAt
	}
	var retryAt *time.Time
	if !claimed && next.WakeAt != nil && next.CurrentStep == s.CurrentStep && next.State == s.State {
		retryAt = next.WakeAt
	}
	return &store.SagaStep{SagaID: s.ID, Step: s.CurrentStep, StepName: name, Phase: string(phase), Attempt: max(s.Attempts, 1),
		Outcome: string(out), IdempotencyKey: IdempotencyKey(s.ID, name, phase), StartedAt: started, EndedAt: now, RetryAt: retryAt, Error: msg}
}

// advance applies the outcome of s's attempt (its current step and phase) at now: it
// moves s to what follows and reports whether that is a new attempt claimed at once (run
// it now), with the outcome to log (unknown for a transient failure past the deadline).
// A compensating saga only ever moves backward.
func (o *Orchestrator) advance(s *store.SagaInstance, def *Definition, out Outcome, msg string, now time.Time) (claimed bool, logged Outcome) {
	step := &def.Steps[s.CurrentStep]
	s.UpdatedAt, s.AttemptStartedAt = now, nil
	if msg != "" {
		s.LastError = msg
	}
	switch State(s.State) {
	case StateRunning:
		switch out {
		case OutcomeSucceeded:
			if s.CurrentStep+1 == len(def.Steps) {
				s.State, s.CurrentStep, s.WakeAt, s.StepDeadline, s.Attempts, s.EndedAt = string(StateSucceeded), len(def.Steps), nil, nil, 0, &now
				return false, out
			}
			s.CurrentStep, s.Attempts, s.StepDeadline = s.CurrentStep+1, 0, nil
			return o.claim(s, def, now), out
		case OutcomeBusinessFailure:
			return o.compensateFrom(s, def, s.CurrentStep-1, now), out
		default: // transient, lost
			retryAt := now.Add(step.Retry.Delay(s.Attempts))
			if s.StepDeadline != nil && retryAt.After(*s.StepDeadline) {
				// The outcome is unknown: the step itself is compensated too.
				return o.compensateFrom(s, def, s.CurrentStep, now), OutcomeUnknown
			}
			s.WakeAt = &retryAt
			return false, out
		}
	default: // compensating
		if out == OutcomeSucceeded {
			return o.compensateFrom(s, def, s.CurrentStep-1, now), out
		}
		if s.Attempts >= step.maxCompensationAttempts() {
			s.State, s.WakeAt = string(StateStuck), nil
			return false, out
		}
		retryAt := now.Add(step.Retry.Delay(s.Attempts))
		s.WakeAt = &retryAt
		return false, out
	}
}

// compensateFrom moves s to the compensation of step j or, skipping the steps without one,
// of the nearest step before it, claimed at now; compensated when there is none.
func (o *Orchestrator) compensateFrom(s *store.SagaInstance, def *Definition, j int, now time.Time) bool {
	for j >= 0 && def.Steps[j].Compensation == nil {
		j--
	}
	s.StepDeadline, s.Attempts = nil, 0
	if j < 0 {
		s.State, s.CurrentStep, s.WakeAt, s.EndedAt = string(StateCompensated), -1, nil, &now
		return false
	}
	s.State, s.CurrentStep = string(StateCompensating), j
	return o.claim(s, def, now)
}

// claim starts a new attempt of s's current step and phase at now: it counts it and sets
// its lease (wake_at) and, for an action's first attempt, the step's deadline.
func (o *Orchestrator) claim(s *store.SagaInstance, def *Definition, now time.Time) bool {
	step := &def.Steps[s.CurrentStep]
	s.Attempts++
	s.AttemptStartedAt = &now
	lease := now.Add(step.timeout() + o.cfg.LeaseMargin)
	s.WakeAt = &lease
	if State(s.State) == StateRunning && s.StepDeadline == nil {
		deadline := now.Add(step.Retry.deadline())
		s.StepDeadline = &deadline
	}
	return true
}

func clone(s *store.SagaInstance) *store.SagaInstance {
	c := *s
	return &c
}
