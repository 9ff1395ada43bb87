// Package outbox is the relay of the transactional outbox (local message table): messages
// written in the same transaction as a state change are claimed in batches, delivered to
// the handler of their topic, retried with capped exponential backoff and jitter, and moved
// to dead with their last error after MaxAttempts, where an admin can re-drive them (I7).
//
// The messages of one key (an order's events and releases, say) are delivered in the order
// they were written: the store never claims a message while an earlier one of its key is
// pending, and within a batch, once a message fails, the later messages of its key are put
// back unattempted; a call (a publish) waits for the local effects of the earlier messages
// of its key to be applied, so an order's order.closed goes out after its stock and coupon
// are released. Other keys are not held up: each message's local effects run in their
// own savepoint of the batch transaction. A dead message does not hold its key (a message
// that keeps failing never blocks the others): the later ones proceed, and a re-driven dead
// message is delivered after them, its event sequence telling consumers it is older.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Config configures a Relay. Zero values mean the documented defaults.
type Config struct {
	Store store.Store
	// Handlers maps topics to their handler.
	Handlers map[string]Handler
	// Default handles topics without a handler (events for other services); when nil, such
	// messages fail and end dead, visible to an admin.
	Default *Handler
	// BatchSize is the number of messages claimed per transaction; 200.
	BatchSize int
	// PollInterval is how often the relay looks for due messages when nobody woke it; 250 ms.
	PollInterval time.Duration
	// MaxAttempts is the number of attempts before a message is dead; 10.
	MaxAttempts int64
	// PendingFor is how long a message whose calls answer Pending (the other side has not
	// made the outcome final: a provider's pending refund) is asked about again before it
	// goes dead, counted from when it was written; 72 h. Its attempts do not count.
	PendingFor time.Duration
	// MinBackoff and MaxBackoff bound the delay before a retry, which doubles per attempt
	// with ±50 % jitter; 1 s and 5 min.
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long a claimed message is hidden from other relays; a crashed relay's
	// messages are retried after it. 30 s.
	Lease time.Duration
	// CallTimeout bounds one Handler.Call; 10 s.
	CallTimeout time.Duration
	// Concurrency is how many keys of a batch have their calls run at once (the messages of
	// one key are always called one after another, in id order); 1. Up to as many keys
	// whose calls outlast PollInterval are handed off to end and commit on their own, so a
	// slow call does not hold back the rest of its batch nor the next ones.
	Concurrency int
	// Lanes are groups of topics claimed and delivered apart from the others, each by its
	// own loop with its own batches, so that slow calls of one lane (merchant webhooks)
	// never delay the messages of another (an order's events, gateway refunds). The topics
	// of no lane form the main lane. A topic belongs to at most one lane. The key order
	// holds across lanes (store.OutboxClaimParams).
	Lanes []Lane
	// Retention is how long delivered messages are kept; 7 days. The Retention method
	// deletes older ones; it runs as a leased job.
	Retention time.Duration
	// StatsInterval is how often the running relay measures the backlog (MeasureBacklog);
	// 5 s.
	StatsInterval time.Duration
	Logger        *slog.Logger
	Metrics       *telemetry.Metrics
	// TracerProvider receives the "outbox dispatch" spans; nil means the global provider
	// (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

// Lane is a group of topics that a relay claims and delivers by a loop of its own
// (Config.Lanes).
type Lane struct {
	Name   string   // for logs and errors, e.g. "webhook"
	Topics []string // required, at least one
	// Concurrency is how many keys of a batch of the lane have their calls run at once;
	// Config.Concurrency when zero.
	Concurrency int
	// CallTimeout bounds one Handler.Call of the lane; Config.CallTimeout when zero.
	CallTimeout time.Duration
	// BatchSize is the number of messages the lane claims per transaction; Config.BatchSize
	// when zero.
	BatchSize int
	// CommitPerKey dispatches each key of a batch on its own (up to Concurrency keys of the
	// lane in flight at once) and commits its outcome (its Apply, delivered, failed and
	// put-back marks) in its own transaction as soon as its calls end; the lane claims its
	// next batch as soon as a slot is free, without waiting for the slowest call of the
	// last one. A slow call then holds back only the later messages of its own key (the
	// store does not claim them while it is leased) and one slot. Meant for topics without
	// Apply, where set-based applies gain nothing (webhook deliveries).
	CommitPerKey bool
	// FedByRelay says that the lane's topics are written only in the relay's own delivery
	// transactions (a fan-out of another lane's messages: webhook deliveries). Relay.Notify,
	// called after every commit that wrote messages elsewhere, then does not wake it (each
	// wake-up was a claim transaction that found nothing); a drain of another lane that
	// handled messages does, and PollInterval covers its retries.
	FedByRelay bool
	// GroupLimit, when positive, is how many keys of one message group (Message.Group: a
	// webhook subscriber) the lane has in flight at most; a group at its limit is skipped by
	// the lane's claims (store.OutboxClaimParams.GroupLimit), so that one group's backlog,
	// re-drive or slow calls never take every slot from the others. With CommitPerKey.
	GroupLimit int
}

// lane is a Lane ready to run: its claim filter, its wake-up channel and, with
// CommitPerKey, its dispatch slots and the keys in flight.
type lane struct {
	Lane
	except   []string // the main lane: every other lane's topics
	wake     chan struct{}
	slots    chan struct{}  // one per key in flight (CommitPerKey)
	inflight sync.WaitGroup // keys in flight (CommitPerKey)
	mu       sync.Mutex
	busy     map[string]int // per message group, keys claimed and not yet committed (GroupLimit)
	// late holds a slot per key handed off by a batch (callOrHandOff), bounding them to
	// Concurrency; lateDeferred counts their messages deferred to a next batch.
	late         chan struct{}
	lateDeferred atomic.Int64
}

// busyGroups returns a copy of l.busy.
func (l *lane) busyGroups() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.busy)
}

// hold adds n keys of group g to l.busy (n < 0 removes them).
func (l *lane) hold(g string, n int) {
	if g == "" || l.GroupLimit <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[g] += n; l.busy[g] <= 0 {
		delete(l.busy, g)
	}
}

// Relay delivers outbox messages. Start it once; Stop is idempotent.
type Relay struct {
	cfg    Config
	tracer trace.Tracer // of cfg.TracerProvider
	lanes  []*lane      // lanes[0] is the main lane
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// NewRelay returns a relay; it returns an error when cfg has no Store or a negative value.
func NewRelay(cfg Config) (*Relay, error) {
	if cfg.Store == nil {
		return nil, errors.New("outbox: Config.Store is required")
	}
	if cfg.BatchSize < 0 || cfg.PollInterval < 0 || cfg.MaxAttempts < 0 || cfg.MinBackoff < 0 || cfg.MaxBackoff < 0 ||
		cfg.Lease < 0 || cfg.CallTimeout < 0 || cfg.Retention < 0 || cfg.StatsInterval < 0 || cfg.Concurrency < 0 {
		return nil, errors.New("outbox: Config values must not be negative")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 200)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 250*time.Millisecond)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 10)
	cfg.PendingFor = cmp.Or(cfg.PendingFor, 72*time.Hour)
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 5*time.Minute)
	cfg.Lease = cmp.Or(cfg.Lease, 30*time.Second)
	cfg.CallTimeout = cmp.Or(cfg.CallTimeout, 10*time.Second)
	cfg.Retention = cmp.Or(cfg.Retention, 7*24*time.Hour)
	cfg.StatsInterval = cmp.Or(cfg.StatsInterval, 5*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, errors.New("outbox: MaxBackoff is below MinBackoff")
	}
	main := &lane{Lane: Lane{Name: "main", Concurrency: cfg.Concurrency, CallTimeout: cfg.CallTimeout, BatchSize: cfg.BatchSize}}
	lanes := []*lane{main}
	owner := map[string]string{}
	for _, l := range cfg.Lanes {
		if l.Name == "" || len(l.Topics) == 0 || l.Concurrency < 0 || l.CallTimeout < 0 || l.BatchSize < 0 || l.GroupLimit < 0 {
			return nil, fmt.Errorf("outbox: lane %q needs a name and topics, and no negative value", l.Name)
		}
		for _, t := range l.Topics {
			if other, dup := owner[t]; dup {
				return nil, fmt.Errorf("outbox: topic %q is in lanes %q and %q", t, other, l.Name)
			}
			owner[t] = l.Name
		}
		l.Topics = slices.Clone(l.Topics)
		l.Concurrency = cmp.Or(l.Concurrency, cfg.Concurrency)
		l.CallTimeout = cmp.Or(l.CallTimeout, cfg.CallTimeout)
		l.BatchSize = cmp.Or(l.BatchSize, cfg.BatchSize)
		main.except = append(main.except, l.Topics...)
		lanes = append(lanes, &lane{Lane: l})
	}
	for _, l := range lanes {
		l.wake = make(chan struct{}, 1)
		l.slots = make(chan struct{}, l.Concurrency)
		l.late = make(chan struct{}, l.Concurrency)
		l.busy = map[string]int{}
	}
	return &Relay{cfg: cfg, tracer: telemetry.TracerOf(cfg.TracerProvider), lanes: lanes}, nil
}

// Notify wakes the relay after a commit that wrote messages. It never blocks.
func (r *Relay) Notify() {
	for _, l := range r.lanes {
		if !l.FedByRelay {
			l.notify()
		}
	}
}

func (l *lane) notify() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Start runs the relay in the background until ctx ends or Stop is called. It returns an
// error when the relay is already running.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		return errors.New("outbox: relay already started")
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range r.lanes {
		wg.Go(func() {
			r.run(ctx, l, i == 0)
			l.inflight.Wait()
		})
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	return nil
}

// Stop stops the relay and waits for the batch in progress to finish. Safe to call twice.
func (r *Relay) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// run is the loop of one lane; the main lane also measures the backlog.
func (r *Relay) run(ctx context.Context, l *lane, measure bool) {
	poll := time.NewTimer(0)
	defer poll.Stop()
	var measured time.Time
	for {
		if _, err := r.drain(ctx, l, false); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("outbox relay pass failed", "lane", l.Name, "error", err)
		}
		if measure && time.Since(measured) >= r.cfg.StatsInterval {
			measured = time.Now()
			if err := r.MeasureBacklog(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Warn("outbox backlog not measured", "error", err)
			}
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-poll.C:
		}
	}
}

// MeasureBacklog reads the outbox backlog (store.Tx.OutboxBacklog) into the metrics
// orderly_outbox_pending, orderly_outbox_dead and orderly_outbox_oldest_pending_age_seconds
// (the age on the database clock). The relay calls it every StatsInterval.
func (r *Relay) MeasureBacklog(ctx context.Context) error {
	return r.cfg.Store.Read(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		pending, dead, oldest, ok, err := tx.OutboxBacklog(ctx)
		if err != nil {
			return err
		}
		r.cfg.Metrics.OutboxPending.Set(float64(pending))
		r.cfg.Metrics.OutboxDeadNow.Set(float64(dead))
		age := 0.0
		if ok {
			age = max(0, now.Sub(oldest).Seconds())
		}
		r.cfg.Metrics.OutboxOldestPendingAge.Set(age)
		return nil
	})
}

// Drain delivers batches of each lane in turn, the main lane first, until one comes back
// short, and returns the number of messages handled (delivered, retried or dead).
func (r *Relay) Drain(ctx context.Context) (int, error) {
	total := 0
	for _, l := range r.lanes {
		n, err := r.drain(ctx, l, true)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// drain delivers batches of lane l until one comes back short; with wait, it waits for
// each batch's keys in flight (CommitPerKey) before the next. Messages handled wake the
// other lanes: a delivered event may have written webhook deliveries (a fan-out).
func (r *Relay) drain(ctx context.Context, l *lane, wait bool) (int, error) {
	total := 0
	defer func() {
		if total > 0 {
			for _, o := range r.lanes {
				if o != l {
					o.notify()
				}
			}
		}
	}()
	for {
		n, deferred, err := r.runOnce(ctx, l)
		total += n
		if wait {
			l.inflight.Wait()
			deferred += int(l.lateDeferred.Swap(0))
		}
		if err != nil || (n < l.BatchSize && deferred == 0) {
			return total, err
		}
	}
}

// errLeaseSpent marks messages whose external call was not attempted because earlier
// calls of the batch used up half of its lease.
var errLeaseSpent = errors.New("not attempted: earlier calls of the batch used half of its lease")

// errHeld marks a message not delivered because an earlier message of its key in the
// batch was not delivered: it must wait for it.
var errHeld = errors.New("not attempted: an earlier message of its key is not delivered yet")

// errDeferred marks a message whose Call was not made because an earlier message of its
// key in the batch has local effects not applied yet (an order's releases before its
// order.closed event): it is called in the next batch, once they are.
var errDeferred = errors.New("not attempted: waits for the local effects of an earlier message of its key")

// errRedo makes apply run again without the messages it has just held back.
var errRedo = errors.New("apply again")

// outcome is what happened to one message in a batch.
type outcome struct {
	msg    *orderly.Message
	err    error
	called bool      // Handler.Call ran (or started)
	next   time.Time // when a message not delivered is due again
	dead   bool      // it failed for good (decided on the database clock in finish)
}

// unattempted reports whether the message was put back without an attempt of its own: it
// goes back untouched (no attempt counted, due at once, never dead).
func (o *outcome) unattempted() bool {
	return !o.called && (errors.Is(o.err, errLeaseSpent) || errors.Is(o.err, errHeld) || errors.Is(o.err, errDeferred))
}

// holdKeys marks errHeld every message that follows a failed message of its key (results
// are in id order). It reports whether one of those had already been applied.
func (r *Relay) holdKeys(results []outcome) (appliedHeld bool) {
	failed := map[string]bool{}
	for i := range results {
		res := &results[i]
		if res.err != nil {
			failed[res.msg.Key] = true
			continue
		}
		if failed[res.msg.Key] {
			res.err = errHeld
			if h, _ := r.handler(res.msg.Topic); h.Apply != nil {
				appliedHeld = true
			}
		}
	}
	return appliedHeld
}

// RunOnce claims one batch of due messages of each lane and delivers it: Call outside any
// transaction, then, in one transaction, each topic's Apply (see apply), then delivered or
// failed marks. It returns the number of messages claimed.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for _, l := range r.lanes {
		n, _, err := r.runOnce(ctx, l)
		l.inflight.Wait()
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// runOnce is RunOnce of one lane; it also returns the number of messages deferred to the
// next batch (errDeferred), which are due at once.
func (r *Relay) runOnce(ctx context.Context, l *lane) (claimed, deferred int, err error) {
	var msgs []*orderly.Message
	err = r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		p := &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(r.cfg.Lease), Limit: l.BatchSize,
			Topics: l.Topics, ExcludeTopics: l.except}
		if l.CommitPerKey && l.GroupLimit > 0 {
			p.GroupLimit, p.Busy = l.GroupLimit, l.busyGroups()
		}
		msgs, err = tx.OutboxClaim(ctx, p)
		return err
	})
	if err != nil || len(msgs) == 0 {
		return 0, 0, err
	}

	// External calls must end well within the lease, or another relay would claim the same
	// messages while this one still calls: past half the lease, the rest of the batch is
	// put back for a later attempt (a hanging broker costs one batch, not the relay).
	// Messages come in id order; once one fails, the later ones of its key wait for it, and
	// no call is made for a key while an earlier message's local effects are not applied.
	// Keys are independent: up to the lane's Concurrency keys have their calls run at once,
	// each key's messages one after another.
	// With CommitPerKey, each key is dispatched on its own and committed when its calls end.
	callsUntil := time.Now().Add(r.cfg.Lease / 2)
	results := byKey(msgs)
	if l.CommitPerKey {
		return len(msgs), 0, r.dispatch(ctx, l, results, callsUntil)
	}
	// A key whose calls outlast PollInterval (a slow gateway or broker) is handed off, if
	// the lane has a late slot free: it gives its slot back and commits on its own when its
	// calls end, while the batch commits the other keys and the lane claims on; its later
	// messages stay unclaimed while its messages are leased, so its order holds.
	var calls errgroup.Group
	calls.SetLimit(l.Concurrency)
	var (
		mu   sync.Mutex
		done []outcome // the keys whose calls ended in the batch, whole, in batch order
	)
	for start := 0; start < len(results); {
		end := start + 1
		for end < len(results) && results[end].msg.Key == results[start].msg.Key {
			end++
		}
		group := results[start:end]
		calls.Go(func() error {
			if r.callOrHandOff(ctx, l, group, callsUntil) {
				mu.Lock()
				done = append(done, group...)
				mu.Unlock()
			}
			return nil
		})
		start = end
	}
	_ = calls.Wait() // callKey records its errors in results
	if len(done) == 0 {
		return len(msgs), 0, nil
	}
	for i := range done {
		if errors.Is(done[i].err, errDeferred) {
			deferred++
		}
	}
	if err := r.finish(ctx, done); err != nil {
		return len(msgs), 0, err
	}
	return len(msgs), deferred, nil
}

// callOrHandOff runs the calls of one key of a batch (callKey) and reports whether they
// ended in the batch. When they outlast PollInterval and a late slot of the lane is free,
// it hands the key off: it returns false at once, and a goroutine of the lane commits the
// key (finish) when its calls end, then wakes the lanes.
func (r *Relay) callOrHandOff(ctx context.Context, l *lane, group []outcome, callsUntil time.Time) bool {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		r.callKey(ctx, l, group, callsUntil)
	}()
	grace := time.NewTimer(r.cfg.PollInterval)
	defer grace.Stop()
	select {
	case <-ended:
		return true
	case <-grace.C:
	}
	select {
	case l.late <- struct{}{}:
	default:
		<-ended // every late slot is taken: the batch waits, as a bound on the calls in flight
		return true
	}
	l.inflight.Go(func() {
		defer func() { <-l.late }()
		<-ended
		err := r.finish(ctx, group)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("outbox outcome not recorded; the messages are claimed again after their lease",
				"lane", l.Name, "key", group[0].msg.Key, "error", err)
		}
		for i := range group {
			if errors.Is(group[i].err, errDeferred) {
				l.lateDeferred.Add(1)
			}
		}
		for _, o := range r.lanes {
			o.notify() // its later messages may be claimed; a delivered event may have fanned out
		}
	})
	return false
}

// dispatch runs each key of results (grouped by key) in a goroutine of its own once a slot
// of the lane is free: its calls, then its commit (finish). It returns when every key is
// started, or with ctx's error when ctx ends first (the keys not started are claimed again
// when their lease ends).
func (r *Relay) dispatch(ctx context.Context, l *lane, results []outcome, callsUntil time.Time) error {
	var keys [][]outcome
	for start := 0; start < len(results); {
		end := start + 1
		for end < len(results) && results[end].msg.Key == results[start].msg.Key {
			end++
		}
		keys = append(keys, results[start:end])
		l.hold(results[start].msg.Group, 1) // claimed: counts against its group until committed
		start = end
	}
	for i, group := range keys {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			for _, g := range keys[i:] {
				l.hold(g[0].msg.Group, -1)
			}
			return ctx.Err()
		}
		l.inflight.Go(func() {
			defer func() {
				l.hold(group[0].msg.Group, -1)
				<-l.slots
				l.notify() // a slot is free: the lane may claim more
			}()
			r.callKey(ctx, l, group, callsUntil)
			if err := r.finish(ctx, group); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Error("outbox outcome not recorded; the messages are claimed again after their lease",
					"lane", l.Name, "key", group[0].msg.Key, "error", err)
			}
		})
	}
	return nil
}

// byKey returns the outcomes of msgs (in id order) grouped by key: the keys in the order of
// their first message, each key's messages in id order.
func byKey(msgs []*orderly.Message) []outcome {
	var keys []string
	groups := map[string][]*orderly.Message{}
	for _, m := range msgs {
		if groups[m.Key] == nil {
			keys = append(keys, m.Key)
		}
		groups[m.Key] = append(groups[m.Key], m)
	}
	results := make([]outcome, 0, len(msgs))
	for _, k := range keys {
		for _, m := range groups[k] {
			results = append(results, outcome{msg: m})
		}
	}
	return results
}

// finish records the outcome of called messages, whole keys only: in one transaction, each
// topic's Apply (see apply), then delivered, failed or put-back marks; then metrics and logs.
func (r *Relay) finish(ctx context.Context, results []outcome) error {
	err := r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		// Apply; when a message fails there, the later messages of its key must not take
		// effect before it: roll the applies back and run them again without those.
		for {
			err := tx.Savepoint(ctx, func() error {
				if err := r.apply(ctx, tx, results); err != nil {
					return err
				}
				if r.holdKeys(results) {
					return errRedo
				}
				return nil
			})
			if !errors.Is(err, errRedo) {
				if err != nil {
					return err
				}
				break
			}
		}
		// A held message is due again when the failed message of its key is: then both are
		// due together and claimed together, in order.
		var delivered []int64
		retryAt := map[string]time.Time{} // per key, when its first failed message is due again
		for i := range results {
			res := &results[i]
			held := errors.Is(res.err, errHeld) // called, but held back by an earlier failure: never dead
			res.dead = res.err != nil && !held && !res.unattempted() && r.dead(res, now)
			switch {
			case res.err == nil:
				delivered = append(delivered, res.msg.ID)
				continue
			case errors.Is(res.err, errHeld) || errors.Is(res.err, errDeferred):
				res.next = cmp.Or(retryAt[res.msg.Key], now)
			case res.unattempted() || res.dead:
				res.next = now
			default:
				res.next = now.Add(r.backoff(res.msg.Attempts))
			}
			if _, ok := retryAt[res.msg.Key]; !ok {
				retryAt[res.msg.Key] = res.next
			}
			if res.unattempted() {
				continue
			}
			if err := tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{
				ID: res.msg.ID, LastError: truncate(res.err.Error(), 2000), Dead: res.dead,
				NextAttemptAt: res.next,
			}); err != nil {
				return err
			}
		}
		if err := r.unclaim(ctx, tx, results); err != nil {
			return err
		}
		return tx.OutboxMarkDelivered(ctx, delivered, now)
	})
	if err != nil {
		return fmt.Errorf("outbox batch of %d: %w", len(results), err)
	}
	for i := range results {
		res := &results[i]
		switch {
		case res.err == nil:
			r.cfg.Metrics.OutboxDelivered.WithLabelValues(res.msg.Topic).Inc()
		case errors.Is(res.err, errHeld) || res.unattempted():
			r.cfg.Logger.Debug("outbox message put back", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "reason", res.err)
		case IsPending(res.err) && !res.dead:
			r.cfg.Metrics.OutboxRetried.WithLabelValues(res.msg.Topic).Inc()
			r.cfg.Logger.Info("outbox message waits for the other side's outcome; will ask again", "message_id", res.msg.ID,
				"topic", res.msg.Topic, "key", res.msg.Key, "attempts", res.msg.Attempts, "detail", res.err)
		case res.dead:
			r.cfg.Metrics.OutboxDead.WithLabelValues(res.msg.Topic).Inc()
			r.cfg.Logger.Error("outbox message dead", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "attempts", res.msg.Attempts, "error", res.err)
		default:
			r.cfg.Metrics.OutboxRetried.WithLabelValues(res.msg.Topic).Inc()
			r.cfg.Logger.Warn("outbox delivery failed; will retry", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "attempts", res.msg.Attempts, "error", res.err)
		}
	}
	return nil
}

// callKey runs the calls of the messages of one key, in id order: once one fails, the later
// ones are held; no call is made while an earlier message's local effects are not applied
// (errDeferred); past callsUntil, the rest is put back (errLeaseSpent).
func (r *Relay) callKey(ctx context.Context, l *lane, results []outcome, callsUntil time.Time) {
	failed, applyPending := false, false
	for i := range results {
		res := &results[i]
		h, ok := r.handler(res.msg.Topic)
		switch {
		case failed:
			res.err = errHeld
		case !ok:
			res.err = Permanent(fmt.Errorf("no handler for topic %q", res.msg.Topic))
		case h.Call == nil:
		case applyPending:
			res.err = errDeferred
		case time.Now().After(callsUntil):
			res.err = errLeaseSpent
		default:
			res.called = true
			res.err = r.call(ctx, l, h, res.msg)
		}
		if res.err != nil {
			failed = true
		} else if h.Apply != nil {
			applyPending = true
		}
	}
}

// dead reports whether a failed message goes dead rather than back to pending. A pending
// outcome is bounded by the message's age, not by its attempts.
func (r *Relay) dead(res *outcome, now time.Time) bool {
	if IsPending(res.err) {
		return now.Sub(res.msg.CreatedAt) >= r.cfg.PendingFor
	}
	return IsPermanent(res.err) || res.msg.Attempts >= r.cfg.MaxAttempts
}

// unclaim puts the unattempted messages back, with their reason, due at their next time.
func (r *Relay) unclaim(ctx context.Context, tx store.Tx, results []outcome) error {
	type group struct {
		reason error
		at     time.Time
	}
	var groups []group
	ids := map[group][]int64{}
	for i := range results {
		if res := &results[i]; res.unattempted() {
			g := group{res.err, res.next}
			if ids[g] == nil {
				groups = append(groups, g)
			}
			ids[g] = append(ids[g], res.msg.ID)
		}
	}
	for _, g := range groups {
		if err := tx.OutboxUnclaim(ctx, ids[g], g.at, g.reason.Error()); err != nil {
			return err
		}
	}
	return nil
}

// apply runs the Apply of each topic on the messages whose Call succeeded: all of a topic's
// messages at once in one savepoint, and, if that fails, each message in its own
// savepoint, so that one failing message leaves the others' effects in place. Errors of
// Apply are recorded in results; the returned error is a database error that fails the batch.
func (r *Relay) apply(ctx context.Context, tx store.Tx, results []outcome) error {
	byTopic := map[string][]*outcome{}
	var topics []string
	for i := range results {
		res := &results[i]
		if res.err != nil {
			continue
		}
		if h, _ := r.handler(res.msg.Topic); h.Apply != nil {
			if byTopic[res.msg.Topic] == nil {
				topics = append(topics, res.msg.Topic)
			}
			byTopic[res.msg.Topic] = append(byTopic[res.msg.Topic], res)
		}
	}
	for _, topic := range topics {
		h, _ := r.handler(topic)
		group := byTopic[topic]
		msgs := make([]*orderly.Message, len(group))
		for i, res := range group {
			msgs[i] = res.msg
		}
		err := tx.Savepoint(ctx, func() error { return r.applySafely(ctx, tx, h, msgs) })
		if err == nil {
			continue
		}
		if len(group) == 1 {
			group[0].err = err
			continue
		}
		for _, res := range group {
			res.err = tx.Savepoint(ctx, func() error { return r.applySafely(ctx, tx, h, []*orderly.Message{res.msg}) })
		}
	}
	return nil
}

// applySafely runs h.Apply, turning a panic into an error.
func (r *Relay) applySafely(ctx context.Context, tx store.Tx, h Handler, msgs []*orderly.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h.Apply(ctx, tx, msgs)
}

func (r *Relay) handler(topic string) (Handler, bool) {
	if h, ok := r.cfg.Handlers[topic]; ok {
		return h, true
	}
	if r.cfg.Default != nil {
		return *r.cfg.Default, true
	}
	return Handler{}, false
}

// call runs h.Call with the lane's call timeout, turning a panic into an error so that one bad
// message cannot stop the relay.
//
// Tracing: the call runs in an "outbox dispatch" span that continues the trace of the
// message (Message.TraceParent), with attributes messaging.destination.name (the topic),
// orderly.key, messaging.message.id, orderly.sequence and orderly.attempt; the handler
// passes that context on (NATS headers, webhook HTTP headers).
func (r *Relay) call(ctx context.Context, l *lane, h Handler, m *orderly.Message) (err error) {
	ctx, cancel := context.WithTimeout(ctx, l.CallTimeout)
	defer cancel()
	ctx, span := r.tracer.Start(telemetry.WithTraceParent(ctx, m.TraceParent), "outbox dispatch "+m.Topic,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
			attribute.String("messaging.destination.name", m.Topic), attribute.String("orderly.key", m.Key),
			attribute.String("messaging.message.id", m.MessageID), attribute.Int64("orderly.sequence", m.Sequence),
			attribute.Int64("orderly.attempt", m.Attempts)))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	return h.Call(ctx, m)
}

// backoff returns the delay before the retry that follows attempt number attempts (1-based):
// MinBackoff doubled per attempt, capped at MaxBackoff, with ±50 % jitter.
func (r *Relay) backoff(attempts int64) time.Duration {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     r.cfg.MinBackoff,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         r.cfg.MaxBackoff,
	}
	b.Reset()
	d := b.NextBackOff()
	for i := int64(1); i < attempts && i < 64; i++ {
		d = b.NextBackOff()
	}
	return d
}

// Retention is the outbox retention job (a job.Func): it deletes delivered messages older
// than Config.Retention in batches of 1000, each transaction fenced by the job's lease.
func (r *Relay) Retention(ctx context.Context, fence job.Fence) (scanned, deleted int64, err error) {
	const batch = 1000
	for {
		var n int64
		err := job.InFencedTx(ctx, r.cfg.Store, fence, func(tx store.Tx, now time.Time) (err error) {
			n, err = tx.OutboxDeleteDelivered(ctx, now.Add(-r.cfg.Retention), batch)
			return err
		})
		deleted += n
		if err != nil || n < batch {
			return deleted, deleted, err
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
