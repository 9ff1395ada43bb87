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
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
	// MinBackoff and MaxBackoff bound the delay before a retry, which doubles per attempt
	// with ±50 % jitter; 1 s and 5 min.
	MinBackoff, MaxBackoff time.Duration
	// Lease is how long a claimed message is hidden from other relays; a crashed relay's
	// messages are retried after it. 30 s.
	Lease time.Duration
	// CallTimeout bounds one Handler.Call; 10 s.
	CallTimeout time.Duration
	// Retention is how long delivered messages are kept; 7 days. The Retention method
	// deletes older ones; it runs as a leased job.
	Retention time.Duration
	// StatsInterval is how often the running relay measures the backlog (MeasureBacklog);
	// 5 s.
	StatsInterval time.Duration
	Logger        *slog.Logger
	Metrics       *telemetry.Metrics
}

// Relay delivers outbox messages. Start it once; Stop is idempotent.
type Relay struct {
	cfg    Config
	wake   chan struct{}
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
		cfg.Lease < 0 || cfg.CallTimeout < 0 || cfg.Retention < 0 || cfg.StatsInterval < 0 {
		return nil, errors.New("outbox: Config values must not be negative")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 200)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 250*time.Millisecond)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 10)
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
	return &Relay{cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// Notify wakes the relay after a commit that wrote messages. It never blocks.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
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
	go r.run(ctx)
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

func (r *Relay) run(ctx context.Context) {
	defer close(r.done)
	poll := time.NewTimer(0)
	defer poll.Stop()
	var measured time.Time
	for {
		if _, err := r.Drain(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("outbox relay pass failed", "error", err)
		}
		if time.Since(measured) >= r.cfg.StatsInterval {
			measured = time.Now()
			if err := r.MeasureBacklog(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Logger.Warn("outbox backlog not measured", "error", err)
			}
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
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

// Drain delivers batches until one comes back short and returns the number of messages
// handled (delivered, retried or dead).
func (r *Relay) Drain(ctx context.Context) (int, error) {
	total := 0
	for {
		n, deferred, err := r.runOnce(ctx)
		total += n
		if err != nil || (n < r.cfg.BatchSize && deferred == 0) {
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

// RunOnce claims one batch of due messages and delivers it: Call outside any transaction,
// then, in one transaction, each topic's Apply (see apply), then delivered or failed
// marks. It returns the number of messages claimed.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	n, _, err := r.runOnce(ctx)
	return n, err
}

// runOnce is RunOnce; it also returns the number of messages deferred to the next batch
// (errDeferred), which are due at once.
func (r *Relay) runOnce(ctx context.Context) (claimed, deferred int, err error) {
	var msgs []*orderly.Message
	err = r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		msgs, err = tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(r.cfg.Lease), Limit: r.cfg.BatchSize})
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
	callsUntil := time.Now().Add(r.cfg.Lease / 2)
	results := make([]outcome, len(msgs))
	failedKeys, applyKeys := map[string]bool{}, map[string]bool{}
	for i, m := range msgs {
		res := &results[i]
		res.msg = m
		h, ok := r.handler(m.Topic)
		switch {
		case failedKeys[m.Key]:
			res.err = errHeld
		case !ok:
			res.err = Permanent(fmt.Errorf("no handler for topic %q", m.Topic))
		case h.Call == nil:
		case applyKeys[m.Key]:
			res.err = errDeferred
			deferred++
		case time.Now().After(callsUntil):
			res.err = errLeaseSpent
		default:
			res.called = true
			res.err = r.call(ctx, h, m)
		}
		if res.err != nil {
			failedKeys[m.Key] = true
		} else if h.Apply != nil {
			applyKeys[m.Key] = true
		}
	}

	err = r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
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
			switch {
			case res.err == nil:
				delivered = append(delivered, res.msg.ID)
				continue
			case errors.Is(res.err, errHeld) || errors.Is(res.err, errDeferred):
				res.next = cmp.Or(retryAt[res.msg.Key], now)
			case res.unattempted() || r.dead(res):
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
			held := errors.Is(res.err, errHeld) // called, but held back by an earlier failure: never dead
			if err := tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{
				ID: res.msg.ID, LastError: truncate(res.err.Error(), 2000), Dead: !held && r.dead(res),
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
		return len(msgs), 0, fmt.Errorf("outbox batch of %d: %w", len(msgs), err)
	}
	for i := range results {
		res := &results[i]
		switch {
		case res.err == nil:
			r.cfg.Metrics.OutboxDelivered.WithLabelValues(res.msg.Topic).Inc()
		case errors.Is(res.err, errHeld) || res.unattempted():
			r.cfg.Logger.Debug("outbox message put back", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "reason", res.err)
		case r.dead(res):
			r.cfg.Metrics.OutboxDead.WithLabelValues(res.msg.Topic).Inc()
			r.cfg.Logger.Error("outbox message dead", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "attempts", res.msg.Attempts, "error", res.err)
		default:
			r.cfg.Metrics.OutboxRetried.WithLabelValues(res.msg.Topic).Inc()
			r.cfg.Logger.Warn("outbox delivery failed; will retry", "message_id", res.msg.ID, "topic", res.msg.Topic,
				"key", res.msg.Key, "attempts", res.msg.Attempts, "error", res.err)
		}
	}
	return len(msgs), deferred, nil
}

// dead reports whether a failed message goes dead rather than back to pending.
func (r *Relay) dead(res *outcome) bool {
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

// call runs h.Call with the call timeout, turning a panic into an error so that one bad
// message cannot stop the relay.
//
// Tracing: the call runs in an "outbox dispatch" span that continues the trace of the
// message (Message.TraceParent), with attributes messaging.destination.name (the topic),
// orderly.key, messaging.message.id, orderly.sequence and orderly.attempt; the handler
// passes that context on (NATS headers, webhook HTTP headers).
func (r *Relay) call(ctx context.Context, h Handler, m *orderly.Message) (err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	ctx, span := telemetry.Tracer().Start(telemetry.WithTraceParent(ctx, m.TraceParent), "outbox dispatch "+m.Topic,
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
		err := r.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			if fence != nil {
				if err := fence(ctx, tx); err != nil {
					return err
				}
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
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
