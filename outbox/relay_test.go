package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// insert writes n messages of topic, with keys "<topic>/0" … "<topic>/<n-1>".
func insert(t *testing.T, e *enginetest.Env, topic string, n int) {
	t.Helper()
	insertKeys(t, e, topic, n, func(i int) string { return fmt.Sprintf("%s/%d", topic, i) })
}

// insertKeys writes n messages of topic in one transaction, message i with key key(i).
func insertKeys(t *testing.T, e *enginetest.Env, topic string, n int, key func(i int) string) {
	t.Helper()
	ctx := context.Background()
	err := e.Store.InTx(ctx, func(tx store.Tx) error {
		var msgs []*store.OutboxInsertParams
		for i := range n {
			m, err := outbox.NewMessage(topic, key(i), map[string]int{"n": i}, e.Clock.Now())
			if err != nil {
				return err
			}
			msgs = append(msgs, m)
		}
		return tx.OutboxInsert(ctx, msgs)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func list(t *testing.T, e *enginetest.Env, state string) []*orderly.Message {
	t.Helper()
	var msgs []*orderly.Message
	e.Read(t, func(tx store.Tx) (err error) {
		msgs, err = tx.OutboxList(context.Background(), state, 1000)
		return err
	})
	return msgs
}

// TestPoisonMessageGoesDead: a message whose handler always fails is retried with growing
// backoff and ends dead with its last error after MaxAttempts, while the messages around
// it, in the same batches, are delivered exactly once (I7).
func TestPoisonMessageGoesDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var applied atomic.Int64
	e := enginetest.New(t, enginetest.Options{MaxAttempts: 4, Handlers: map[string]outbox.Handler{
		"test.ok": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			for _, m := range msgs {
				applied.Add(1)
				// A local effect in the same transaction: it must survive the poison's rollback.
				if _, err := tx.StockSet(ctx, "effect-"+m.Key, 1); err != nil {
					return err
				}
			}
			return nil
		}},
		"test.poison": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			if _, err := tx.StockSet(ctx, "poison-effect", 1); err != nil {
				return err
			}
			return errors.New("downstream says no")
		}},
	}})
	insert(t, e, "test.ok", 3)
	insert(t, e, "test.poison", 1)
	insertKeys(t, e, "test.ok", 2, func(i int) string { return fmt.Sprintf("test.ok/%d", 3+i) })

	var lastNext time.Time
	for attempt := 1; attempt <= 4; attempt++ {
		if _, err := e.Relay.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		pending := list(t, e, orderly.MessagePending)
		if attempt < 4 {
			if len(pending) != 1 || pending[0].Topic != "test.poison" || pending[0].Attempts != int64(attempt) ||
				pending[0].LastError != "downstream says no" {
				t.Fatalf("attempt %d: pending %+v", attempt, pending)
			}
			// Capped exponential backoff with ±50 % jitter around 1 s, 2 s, 4 s.
			delay := pending[0].NextAttemptAt.Sub(e.Clock.Now())
			base := time.Second << (attempt - 1)
			if delay < base/2 || delay > base*3/2 {
				t.Fatalf("attempt %d: retry in %s, want %s ± 50 %%", attempt, delay, base)
			}
			lastNext = pending[0].NextAttemptAt
			e.Clock.Set(lastNext)
		}
	}
	if n := applied.Load(); n != 5 {
		t.Fatalf("ok handler applied %d times, want 5", n)
	}
	if got := len(list(t, e, orderly.MessageDelivered)); got != 5 {
		t.Fatalf("%d delivered, want 5", got)
	}
	dead := list(t, e, orderly.MessageDead)
	if len(dead) != 1 || dead[0].Attempts != 4 || dead[0].LastError != "downstream says no" {
		t.Fatalf("dead %+v", dead)
	}
	if _, err := e.Orders.Stock(ctx, "poison-effect"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("the poison's own write was not rolled back: %v", err)
	}
	if _, err := e.Orders.Stock(ctx, "effect-test.ok/4"); err != nil {
		t.Fatalf("an ok message's effect is missing: %v", err)
	}

	// Re-drive: pending again with attempts reset, delivered once the handler works.
	err := e.Store.InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.OutboxRedrive(ctx, dead[0].ID, e.Clock.Now())
		if err == nil && !ok {
			err = errors.New("redrive changed nothing")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := list(t, e, orderly.MessagePending); len(p) != 1 || p[0].Attempts != 0 {
		t.Fatalf("after re-drive: %+v", p)
	}
}

// TestPendingOutcomeOutlivesMaxAttempts: a call answering Pending (the other side accepted
// it, its outcome is not final) is asked again with the usual backoff past MaxAttempts,
// logged as waiting and never dead while younger than PendingFor, and delivered once the
// other side answers; one still pending PendingFor (72 h) after it was written goes dead.
func TestPendingOutcomeOutlivesMaxAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int64
	final := map[string]bool{}
	var mu sync.Mutex
	e := enginetest.New(t, enginetest.Options{MaxAttempts: 2, Handlers: map[string]outbox.Handler{
		"test.pending": {Call: func(_ context.Context, m *orderly.Message) error {
			calls.Add(1)
			mu.Lock()
			defer mu.Unlock()
			if final[m.Key] {
				return nil
			}
			return outbox.Pending(errors.New("refund is pending at the provider"))
		}},
	}})
	insertKeys(t, e, "test.pending", 2, func(i int) string { return fmt.Sprintf("k%d", i) })
	for attempt := 1; attempt <= 6; attempt++ { // three times MaxAttempts
		if _, err := e.Relay.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		pending := list(t, e, orderly.MessagePending)
		if len(pending) != 2 || pending[0].Attempts != int64(attempt) || pending[0].LastError != "refund is pending at the provider" {
			t.Fatalf("attempt %d: pending %d messages, first %+v; want both pending", attempt, len(pending), pending[0])
		}
		e.Clock.Set(pending[0].NextAttemptAt.Add(time.Second))
	}
	if dead := list(t, e, orderly.MessageDead); len(dead) != 0 {
		t.Fatalf("dead %+v, want none: a pending outcome is not a failure", dead)
	}
	mu.Lock()
	final["k0"] = true
	mu.Unlock()
	e.Clock.Advance(72 * time.Hour) // k1 is now older than PendingFor
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if d := list(t, e, orderly.MessageDelivered); len(d) != 1 || d[0].Key != "k0" {
		t.Fatalf("delivered %+v, want k0", d)
	}
	if d := list(t, e, orderly.MessageDead); len(d) != 1 || d[0].Key != "k1" || d[0].Attempts <= 2 {
		t.Fatalf("dead %+v, want k1, past MaxAttempts", d)
	}
	if calls.Load() < 12 {
		t.Fatalf("%d calls, want at least 12 (6 or more per message)", calls.Load())
	}
}

// TestOneBadMessageInABatch: when a topic's batch Apply fails, the relay retries its
// messages one by one, so the good ones are delivered with their effects and only the bad
// one is retried.
func TestOneBadMessageInABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var batches, singles atomic.Int64
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{
		"test.mixed": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			if len(msgs) > 1 {
				batches.Add(1)
			} else {
				singles.Add(1)
			}
			for _, m := range msgs {
				if _, err := tx.StockSet(ctx, "effect-"+m.Key, 1); err != nil {
					return err
				}
				if m.Key == "test.mixed/3" {
					return errors.New("message 3 is bad")
				}
			}
			return nil
		}},
	}})
	insert(t, e, "test.mixed", 6)
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if batches.Load() != 1 || singles.Load() != 6 {
		t.Fatalf("%d batch and %d single applies, want 1 and 6", batches.Load(), singles.Load())
	}
	if d := list(t, e, orderly.MessageDelivered); len(d) != 5 {
		t.Fatalf("%d delivered, want 5", len(d))
	}
	if p := list(t, e, orderly.MessagePending); len(p) != 1 || p[0].Key != "test.mixed/3" || p[0].LastError != "message 3 is bad" {
		t.Fatalf("pending %+v, want message 3 with its error", p)
	}
	for key, want := range map[string]bool{"0": true, "2": true, "3": false, "5": true} {
		_, err := e.Orders.Stock(ctx, "effect-test.mixed/"+key)
		if got := err == nil; got != want {
			t.Errorf("effect of message %s present = %v, want %v", key, got, want)
		}
	}
}

func TestCallFailuresAndPanics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int64
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{
		"test.flaky": {Call: func(ctx context.Context, m *orderly.Message) error {
			if calls.Add(1) == 1 {
				return errors.New("timeout talking to the gateway")
			}
			return nil
		}},
		"test.panics": {Call: func(ctx context.Context, m *orderly.Message) error { panic("boom") }},
		"test.badjson": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			var v []string
			return outbox.Decode(msgs[0], &v)
		}},
	}})
	insert(t, e, "test.flaky", 1)
	insert(t, e, "test.panics", 1)
	insert(t, e, "test.badjson", 1)
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	pending := list(t, e, orderly.MessagePending)
	if len(pending) != 2 {
		t.Fatalf("pending %+v, want flaky and panics", pending)
	}
	for _, m := range pending {
		if m.Topic == "test.panics" && !strings.Contains(m.LastError, "panicked: boom") {
			t.Fatalf("panic not recorded: %q", m.LastError)
		}
	}
	// A malformed payload is permanent: dead at the first attempt.
	if dead := list(t, e, orderly.MessageDead); len(dead) != 1 || dead[0].Topic != "test.badjson" || dead[0].Attempts != 1 {
		t.Fatalf("dead %+v", dead)
	}
	e.Clock.Advance(2 * time.Second)
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if d := list(t, e, orderly.MessageDelivered); len(d) != 1 || d[0].Topic != "test.flaky" || d[0].Attempts != 2 {
		t.Fatalf("delivered %+v, want the flaky one after 2 attempts", d)
	}
}

// TestLease: a claimed message is invisible until its lease ends, then claimed again (a
// relay that crashed mid-batch loses nothing).
func TestLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	insert(t, e, "test.any", 2)
	claim := func() []*orderly.Message {
		var msgs []*orderly.Message
		err := e.Store.InTx(ctx, func(tx store.Tx) (err error) {
			now, _ := tx.Now(ctx)
			msgs, err = tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(30 * time.Second), Limit: 10})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return msgs
	}
	if got := claim(); len(got) != 2 {
		t.Fatalf("first claim got %d", len(got))
	}
	e.Clock.Advance(29 * time.Second)
	if got := claim(); len(got) != 0 {
		t.Fatalf("claim inside the lease got %d", len(got))
	}
	e.Clock.Advance(time.Second)
	if got := claim(); len(got) != 2 || got[0].Attempts != 2 {
		t.Fatalf("claim after the lease got %+v", got)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	insert(t, e, "test.any", 3)
	e.Drain(t)
	e.Clock.Advance(7*24*time.Hour + time.Millisecond)
	insert(t, e, "test.any", 1)
	e.Drain(t)
	_, n, err := e.Relay.Retention(ctx, nil)
	if err != nil || n != 3 {
		t.Fatalf("Retention deleted %d, %v; want the 3 old ones", n, err)
	}
	if d := list(t, e, orderly.MessageDelivered); len(d) != 1 {
		t.Fatalf("%d delivered left, want 1", len(d))
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	ctx := context.Background()
	if err := e.Relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Relay.Start(ctx); err == nil {
		t.Fatal("second Start succeeded")
	}
	insert(t, e, "test.any", 1)
	e.Relay.Notify()
	deadline := time.Now().Add(5 * time.Second)
	for len(list(t, e, orderly.MessageDelivered)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("relay did not deliver within 5 s of Notify")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.Relay.Stop()
	e.Relay.Stop()
}

// TestHangingCallsGiveBackTheBatch: when external calls are slow (a hanging broker), the
// relay stops calling once half of the batch's lease is spent and puts the rest back, so
// no other relay claims messages this one is still calling.
func TestHangingCallsGiveBackTheBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var calls atomic.Int64
	e := enginetest.New(t, enginetest.Options{})
	relay, err := outbox.NewRelay(outbox.Config{Store: e.Store, Lease: 200 * time.Millisecond, Handlers: map[string]outbox.Handler{
		"test.slow": {Call: func(ctx context.Context, m *orderly.Message) error {
			calls.Add(1)
			time.Sleep(60 * time.Millisecond) // a broker that answers, slowly
			return nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	insert(t, e, "test.slow", 10)
	if _, err := relay.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 1 || n > 3 {
		t.Fatalf("%d calls in a 200 ms lease of 60 ms calls, want 1–3 (stop after 100 ms)", n)
	}
	pending := list(t, e, orderly.MessagePending)
	if len(pending) != 10-int(calls.Load()) {
		t.Fatalf("%d pending after the batch, want the %d not called", len(pending), 10-calls.Load())
	}
	for _, m := range pending {
		if !strings.HasPrefix(m.LastError, "not attempted") {
			t.Fatalf("pending message %d: last error %q", m.ID, m.LastError)
		}
	}
}

// TestKeyOrder: when a message fails, the later messages of its key wait, unattempted, until
// it is delivered, while other keys go on; a failure in Apply holds them back too, and
// their local effects are rolled back. Then they are delivered in order.
func TestKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var (
		calls      []string // "key/n" in call order
		applyFails atomic.Bool
	)
	applyFails.Store(true)
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{
		"test.publish": {Call: func(ctx context.Context, m *orderly.Message) error {
			var p struct{ N int }
			if err := outbox.Decode(m, &p); err != nil {
				return err
			}
			calls = append(calls, fmt.Sprintf("%s/%d", m.Key, p.N))
			if m.Key == "order-1" && p.N == 0 && m.Attempts == 1 {
				return errors.New("broker unreachable")
			}
			return nil
		}},
		"test.local-fails": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			if applyFails.Load() {
				return errors.New("local effect failed")
			}
			return nil
		}},
		"test.local": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			for _, m := range msgs {
				if _, err := tx.StockSet(ctx, "effect-"+m.Key, 1); err != nil {
					return err
				}
			}
			return nil
		}},
	}})
	// order-1: an event that fails once, then one that must wait for it. order-2: goes on.
	// order-3: a local effect that fails, then one whose effect must wait for it.
	insertKeys(t, e, "test.publish", 2, func(int) string { return "order-1" })
	insertKeys(t, e, "test.publish", 1, func(int) string { return "order-2" })
	insertKeys(t, e, "test.local-fails", 1, func(int) string { return "order-3" })
	insertKeys(t, e, "test.local", 1, func(int) string { return "order-3" })
	insertKeys(t, e, "test.local", 1, func(int) string { return "order-4" })
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"order-1/0", "order-2/0"}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v (order-1/1 waits for order-1/0)", calls, want)
	}
	state := func() string {
		var b strings.Builder
		for _, st := range []string{orderly.MessagePending, orderly.MessageDelivered} {
			for _, m := range list(t, e, st) {
				fmt.Fprintf(&b, "%s %s %s attempts=%d error=%q\n", m.Key, m.Topic, m.State, m.Attempts, m.LastError)
			}
		}
		return b.String()
	}
	want := `order-1 test.publish pending attempts=1 error="broker unreachable"
order-1 test.publish pending attempts=0 error="not attempted: an earlier message of its key is not delivered yet"
order-3 test.local-fails pending attempts=1 error="local effect failed"
order-3 test.local pending attempts=0 error="not attempted: an earlier message of its key is not delivered yet"
order-2 test.publish delivered attempts=1 error=""
order-4 test.local delivered attempts=1 error=""
`
	if got := state(); got != want {
		t.Fatalf("after the first pass:\n%s\nwant:\n%s", got, want)
	}
	if _, err := e.Orders.Stock(ctx, "effect-order-3"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("order-3's second message took effect before its first: %v", err)
	}
	if _, err := e.Orders.Stock(ctx, "effect-order-4"); err != nil {
		t.Fatalf("order-4's effect is missing: %v", err)
	}

	applyFails.Store(false)
	e.Clock.Advance(2 * time.Second) // past the first retry's backoff (1 s ± 50 %)
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"order-1/0", "order-2/0", "order-1/0", "order-1/1"}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	if p := list(t, e, orderly.MessagePending); len(p) != 0 {
		t.Fatalf("pending after the retry: %s", state())
	}
	if _, err := e.Orders.Stock(ctx, "effect-order-3"); err != nil {
		t.Fatalf("order-3's effect is missing: %v", err)
	}
}

// TestEventWaitsForLocalEffects: an event is not published before the local effects of an
// earlier message of its key (an order's stock release before its order.closed) are
// applied: in one Drain when they apply, after their retry when they fail.
func TestEventWaitsForLocalEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var (
		calls   []string
		applied []string
	)
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{
		"test.release": {Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			for _, m := range msgs {
				if m.Key == "order-2" && m.Attempts == 1 {
					return errors.New("release failed")
				}
			}
			for _, m := range msgs {
				applied = append(applied, m.Key)
			}
			return nil
		}},
		"test.event": {Call: func(ctx context.Context, m *orderly.Message) error {
			if len(applied) == 0 || !slices.Contains(applied, m.Key) {
				return fmt.Errorf("event of %s called before its release was applied (applied: %v)", m.Key, applied)
			}
			calls = append(calls, m.Key)
			return nil
		}},
	}})
	for _, key := range []string{"order-1", "order-2"} {
		insertKeys(t, e, "test.release", 1, func(int) string { return key })
		insertKeys(t, e, "test.event", 1, func(int) string { return key })
	}
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(calls) != "[order-1]" {
		t.Fatalf("events published after the first drain: %v, want [order-1]", calls)
	}
	var left []string
	for _, m := range list(t, e, orderly.MessagePending) {
		left = append(left, fmt.Sprintf("%s %s attempts=%d", m.Key, m.Topic, m.Attempts))
	}
	if want := "[order-2 test.release attempts=1 order-2 test.event attempts=0]"; fmt.Sprint(left) != want {
		t.Fatalf("pending %v, want %s", left, want)
	}
	e.Clock.Advance(2 * time.Second)
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(calls) != "[order-1 order-2]" {
		t.Fatalf("events published: %v, want [order-1 order-2]", calls)
	}
	if p := list(t, e, orderly.MessagePending); len(p) != 0 {
		t.Fatalf("%d messages still pending", len(p))
	}
}
