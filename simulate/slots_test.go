package simulate

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/internal/testenv"
)

// TestSlotsFollowUpsFirst: with every slot taken, a freed slot goes to the follow-up
// requests that wait, oldest first, and only then to new work, even new work that waited
// longer.
func TestSlotsFollowUpsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newSlots(1)
	if err := s.acquire(ctx, newWork); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	queued := 0
	wait := func(name string, p priority) {
		go func() {
			if err := s.acquire(ctx, p); err != nil {
				got <- name + ": " + err.Error()
				return
			}
			got <- name
		}()
		queued++ // wait until it is queued, so that the next one queues after it
		for deadline := time.Now().Add(5 * time.Second); ; {
			s.mu.Lock()
			n := s.waiting[followUp].Len() + s.waiting[newWork].Len()
			s.mu.Unlock()
			if n == queued {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("create-1", newWork)
	wait("create-2", newWork)
	wait("pay-1", followUp)
	wait("pay-2", followUp)
	var order []string
	for range 4 {
		s.release()
		order = append(order, <-got)
	}
	if want := []string{"pay-1", "pay-2", "create-1", "create-2"}; !slices.Equal(order, want) {
		t.Errorf("slots granted in the order %v, want %v", order, want)
	}
	s.release()
	if s.free != 1 {
		t.Errorf("%d free slots after every request released, want 1", s.free)
	}
}

// TestSlotsCancelled: a waiter whose ctx ends leaves the queue without a slot, and a slot
// is never lost to it.
func TestSlotsCancelled(t *testing.T) {
	t.Parallel()
	s := newSlots(2)
	for range 2 {
		if err := s.acquire(context.Background(), followUp); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.acquire(ctx, newWork); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with every slot taken until ctx ended = %v, want context.DeadlineExceeded", err)
	}
	if n := s.waiting[newWork].Len(); n != 0 {
		t.Errorf("%d waiters left after ctx ended, want 0", n)
	}
	s.release()
	s.release()
	if s.free != 2 {
		t.Errorf("%d free slots, want 2", s.free)
	}
}

// TestRunOverloadedServerStillPays: a run at a rate the server cannot serve still plays
// its buyers as planned. The fake server serves one write at a time, each taking 5 ms (200
// writes/s), while the plan sends 300 orders/s, each with a payment start, callbacks and
// refunds to follow. The creates must queue, not the buyers: nearly every buyer who pays
// in time ends paid. With one queue for all requests, the payment starts waited behind the
// creates sent before them, longer than the 1 s payment timeout, and were refused as late:
// 0 of 162 such orders ended paid.
//
// Not parallel: the 1 s timeout is short, and a box busy with the package's other runs
// delays the buyers' own goroutines into pay/close races.
func TestRunOverloadedServerStillPays(t *testing.T) {
	testenv.Long(t)
	res, _ := runFake(t, fakeOptions{grace: 100 * time.Millisecond, slowWrites: 5 * time.Millisecond},
		Config{Orders: 300, Rate: 300, Concurrency: 8, Seed: 7})
	if !res.OK() {
		t.Fatalf("violations against a correct server:\n%s", res.Summary())
	}
	t.Logf("\n%s", res.Summary())
	payers := 0
	for _, b := range []behaviour{payOnTime, payJustBefore, payDuplicate, payFailRetry} {
		payers += res.Behaviours[b.String()]
	}
	if payers < res.Orders/2 {
		t.Fatalf("%d of %d created orders have buyers who pay in time, want more than half (the plan's share is 60 %%)", payers, res.Orders)
	}
	// Alone on a quiet box about 93 % end paid (a few successes race the close), 62 % on a
	// box at load 50; with one queue for all requests none did (180 of 272 missed).
	if res.Paid < payers/2 || res.MissedDeadline > res.Orders*15/100 {
		t.Errorf("%d orders paid of %d whose buyers pay in time (want ≥ 50 %%), %d buyers of %d orders reached the server after their deadline (want ≤ 15 %%); request slot wait %+v",
			res.Paid, payers, res.MissedDeadline, res.Orders, res.QueueWait)
	}
}
