package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Config.CreateBatch and Config.CreateQueue.
const (
	// DefaultCreateBatch is the most creates joined into one transaction. PostgreSQL keeps
	// 64 subtransactions per transaction in shared memory (each member is a savepoint);
	// past that every other session's snapshot checks read pg_subtrans.
	DefaultCreateBatch = 32
	// DefaultCreateQueue is the most creates of one SKU waiting in one process.
	DefaultCreateQueue = 512
)

// createBatcher joins concurrent creates of one-line orders of the same SKU into one
// transaction (group commit). A hot SKU's stock row admits one transaction at a time, so
// creates of that SKU run one after another whatever the pool size; joined, they share
// one row lock, one gate (store/sqlstore/gate.go) and one commit. Per SKU, one goroutine
// runs the batches while creates wait: each batch takes up to max waiting creates in
// arrival order. A member refused for a domain reason (out-of-stock, coupon-unavailable,
// an idempotency conflict) does not fail the others: the batch runs with each member in
// its own savepoint (createBatch), the refused member is rolled back to its savepoint and
// answered with its error, and the others go on. Stock is reserved by the same guarded
// update as a single create, so a batch never oversells; an idempotency key is looked up
// in the batch's transaction, so two creates with one key in one batch make one order.
// An error that is not a domain error (the database's) fails the whole batch, like a
// single create.
//
// When queue creates of a SKU already wait, a create is refused at once with
// EUNAVAILABLE (load shedding): waiting longer than the request's deadline would end in
// the same 503, and another instance may take it now.
type createBatcher struct {
	max, queue int
	// run runs a batch; careful says that the SKU's previous batch had a refused member.
	// It reports whether this one had.
	run  func(calls []*createCall, careful bool) (refused bool)
	mu   sync.Mutex
	skus map[string]*skuQueue
}

// skuQueue is the creates of one SKU waiting for a batch.
type skuQueue struct {
	waiting []*createCall
}

// createCall is one create waiting for (or in) a batch.
type createCall struct {
	ctx  context.Context
	p    *orderly.CreateOrderParams
	done chan struct{} // closed when o, created and err are set

	o       *orderly.Order
	created bool
	err     error
}

// do queues the create of p (a one-line order of sku) and returns its outcome once its
// batch committed or failed. When ctx ends before the create joined a batch, do returns
// at once (EUNAVAILABLE for an expired deadline, ctx's error otherwise); once it joined
// one, do waits for the batch's outcome, whose transaction ends by the earliest deadline
// of its members.
func (b *createBatcher) do(ctx context.Context, sku string, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	c := &createCall{ctx: ctx, p: p, done: make(chan struct{})}
	b.mu.Lock()
	q := b.skus[sku]
	if q == nil {
		q = &skuQueue{}
		b.skus[sku] = q
		go b.loop(sku, q)
	}
	if len(q.waiting) >= b.queue {
		n := len(q.waiting)
		b.mu.Unlock()
		return nil, false, orderly.Errorf(orderly.EUNAVAILABLE,
			"%d orders of sku %s are queued in this instance (limit %d); nothing was changed, retry later", n, sku, b.queue)
	}
	q.waiting = append(q.waiting, c)
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(q.waiting, c); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
			b.mu.Unlock()
			return nil, false, contextError(ctx)
		}
		b.mu.Unlock()
		<-c.done
	}
	return c.o, c.created, c.err
}

// loop runs the batches of sku until none waits, then drops the queue.
func (b *createBatcher) loop(sku string, q *skuQueue) {
	careful := false
	for {
		b.mu.Lock()
		if len(q.waiting) == 0 {
			delete(b.skus, sku)
			b.mu.Unlock()
			return
		}
		n := min(len(q.waiting), b.max)
		calls := slices.Clone(q.waiting[:n])
		q.waiting = slices.Delete(q.waiting, 0, n)
		b.mu.Unlock()
		// Members freeze their coupons in coupon id order: two batches (of two SKUs) whose
		// members freeze the same coupons then lock them in the same order and cannot
		// deadlock on them. Every other transaction takes at most one coupon, after its
		// stock rows.
		slices.SortStableFunc(calls, func(a, b *createCall) int { return strings.Compare(a.p.CouponID, b.p.CouponID) })
		careful = b.run(calls, careful)
		for _, c := range calls {
			close(c.done)
		}
	}
}

// waiters returns how many creates of sku wait for a batch (tests).
func (b *createBatcher) waiters(sku string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.skus[sku]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// contextError is the error of a create whose context ended before it ran: EUNAVAILABLE
// when its deadline expired (nothing was changed; retry), the context's error otherwise
// (the caller went away).
func contextError(ctx context.Context) error {
	err := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", orderly.Errorf(orderly.EUNAVAILABLE, "the request's deadline expired while it waited for the database; nothing was changed, retry later"), err)
	}
	return err
}

// memberContext is a batch member's context inside its batch: the batch's deadline and
// cancellation (the transaction's), the member's values (its trace span, its logger).
type memberContext struct {
	context.Context                 // the batch's
	values          context.Context // the member's
}

func (c memberContext) Value(key any) any { return c.values.Value(key) }

// batchContext is the context of a batch's transaction: the first member's values, and
// the earliest deadline of the members, so that no member's answer comes after its
// deadline and a batch that runs out of time changed nothing.
func batchContext(calls []*createCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var deadline time.Time
	for _, c := range calls {
		if d, ok := c.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}

// errMemberRefused ends an attempt of a batch run without savepoints at its first member
// refused for a domain reason: the batch runs again with savepoints.
var errMemberRefused = errors.New("a member of the batch was refused")

// createBatch creates the orders of calls in one transaction and sets each call's outcome
// (see createBatcher); it reports whether a member was refused. A member whose context
// ended before the batch started is answered with contextError and not run.
//
// Savepoints cost two round trips per member, and most batches have no refused member:
// unless careful (the SKU's previous batch had a refused member), the batch first runs
// without them, and runs again with them only when a member is refused.
func (s *Service) createBatch(calls []*createCall, careful bool) (refused bool) {
	live := calls[:0:0]
	for _, c := range calls {
		if c.ctx.Err() != nil {
			c.err = contextError(c.ctx)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return false
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	reset := func() {
		for _, c := range live {
			c.o, c.created, c.err = nil, false, nil
		}
	}
	var err error
	if !careful || len(live) == 1 {
		err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			reset() // a run again (a deadlock, a gate) starts from scratch
			for _, c := range live {
				var err error
				if c.o, c.created, err = s.CreateInTx(memberContext{ctx, c.ctx}, tx, c.p, nil); err != nil {
					if len(live) == 1 {
						return err
					}
					if orderly.ErrorCode(err) != orderly.EINTERNAL {
						return fmt.Errorf("%w: %w", errMemberRefused, err)
					}
					return err
				}
			}
			return nil
		})
		if !errors.Is(err, errMemberRefused) {
			if err != nil {
				for _, c := range live {
					c.o, c.created, c.err = nil, false, err
				}
			}
			return err != nil && orderly.ErrorCode(err) != orderly.EINTERNAL && orderly.ErrorCode(err) != orderly.EUNAVAILABLE
		}
	}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		reset()
		for _, c := range live {
			mctx := memberContext{ctx, c.ctx}
			err := tx.Savepoint(mctx, func() error {
				var err error
				c.o, c.created, err = s.CreateInTx(mctx, tx, c.p, nil)
				return err
			})
			if err == nil {
				continue
			}
			if orderly.ErrorCode(err) == orderly.EINTERNAL {
				return err // the database's: the batch fails (or runs again) as a whole
			}
			c.o, c.created, c.err = nil, false, err
			refused = true
		}
		return nil
	})
	if err != nil {
		for _, c := range live {
			c.o, c.created, c.err = nil, false, err
		}
		return false
	}
	return refused
}
