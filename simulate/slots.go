package simulate

import (
	"container/list"
	"context"
	"sync"
)

// priority is the class of a request waiting for one of the client's slots.
type priority int

const (
	// followUp is a request about work already under way: a buyer's payment start,
	// callback or cancel, a poll, a refund, a read. Its order has a deadline running.
	followUp priority = iota
	// newWork is a request that starts new work: a standard order's create. Nothing of it
	// runs on the server yet, so it can wait. (The other flows' creates are follow-ups:
	// their polls would starve them.)
	newWork
	numPriorities
)

// slots caps the requests in flight at n. A freed slot goes to the longest-waiting
// follow-up request first and to a new-work request only when no follow-up waits: when the
// server cannot keep up with the send rate, the creates queue up, not the buyers behind
// them. With one FIFO queue for all (a buffered channel), a buyer's payment start waited
// behind every create sent before it, and once that backlog grew past the payment timeout
// (a long run at a rate the server cannot serve) nearly every start reached the server
// after its order's deadline and was refused: the run then barely tested payments.
type slots struct {
	mu      sync.Mutex
	free    int
	waiting [numPriorities]*list.List // of chan struct{}, oldest first
}

func newSlots(n int) *slots {
	s := &slots{free: max(n, 1)}
	for i := range s.waiting {
		s.waiting[i] = list.New()
	}
	return s
}

// acquire waits for a slot for a request of class p. It returns ctx's error, without a
// slot, if ctx ends first.
func (s *slots) acquire(ctx context.Context, p priority) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ready := make(chan struct{}, 1)
	e := s.waiting[p].PushBack(ready)
	s.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ready: // granted meanwhile: hand it on
		s.releaseLocked()
	default:
		s.waiting[p].Remove(e)
	}
	return ctx.Err()
}

// release frees a slot acquired before.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	for _, l := range s.waiting {
		if e := l.Front(); e != nil {
			l.Remove(e).(chan struct{}) <- struct{}{} //nolint:forcetypeassert // only channels are queued
			return
		}
	}
	s.free++
}
