package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/batchctx"
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
// arrival order. A batch without coupons is written as one set (createTogether): the
// members' orders are decided first, the SKU's available units are handed out in arrival
// order under the stock row's lock, and the orders, audit rows and reservations are
// written in multi-row statements with one guarded update of the stock row, so a refused
// member wrote nothing. A batch with coupons runs member by member, and a member refused
// for a domain reason (out-of-stock, coupon-unavailable, an idempotency conflict) does not
// fail the others: the batch runs with each member in its own savepoint (createBatch), the
// refused member is rolled back to its savepoint and answered with its error, and the
// others go on. Either way stock is reserved by a guarded update, so a batch never
// oversells; an idempotency key is looked up in the batch's transaction, so two creates
// with one key in one batch make one order.
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
	// waiting is the creates waiting, all SKUs (orderly_create_queue_waiting).
	waiting prometheus.Gauge
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
	b.waiting.Inc()
	b.mu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(q.waiting, c); i >= 0 {
			q.waiting = slices.Delete(q.waiting, i, i+1)
			b.waiting.Dec()
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
		b.waiting.Sub(float64(n))
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
	ctx, cancel := batchctx.Batch(live, func(c *createCall) context.Context { return c.ctx })
	defer cancel()
	reset := func() {
		for _, c := range live {
			c.o, c.created, c.err = nil, false, nil
		}
	}
	var err error
	if together(live) {
		err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			reset() // a run again (a deadlock, a gate) starts from scratch
			var err error
			refused, err = s.createTogether(ctx, tx, live)
			return err
		})
		if orderly.ErrorCode(err) != orderly.ECONFLICT { // a key taken meanwhile: one by one, below
			if err != nil {
				for _, c := range live {
					c.o, c.created, c.err = nil, false, err
				}
				return false
			}
			return refused
		}
	} else if !careful || len(live) == 1 {
		err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			reset() // a run again (a deadlock, a gate) starts from scratch
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			for _, c := range live {
				var err error
				if c.o, c.created, err = s.CreateInTx(batchctx.Member(ctx, c.ctx), tx, c.p, &CreateOptions{Now: now}); err != nil {
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
		refused = false // a run again (a deadlock, a gate) decides anew
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		for _, c := range live {
			mctx := batchctx.Member(ctx, c.ctx)
			err := tx.Savepoint(mctx, func() error {
				var err error
				c.o, c.created, err = s.CreateInTx(mctx, tx, c.p, &CreateOptions{Now: now})
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

// together reports whether a batch can run as one set of writes (createTogether): none of
// its members names a coupon (a coupon is frozen by a guarded update that may refuse its
// member after the order was written).
func together(calls []*createCall) bool {
	for _, c := range calls {
		if c.p.CouponID != "" {
			return false
		}
	}
	return len(calls) > 1
}

// createTogether is createBatch's transaction for a batch without coupons. It decides
// every member's order first (newOrder: validation, idempotency key; nothing written),
// then hands out the SKU's available units in arrival order under the stock row's lock
// (a member whose quantity no longer fits is refused out-of-stock, as it would be one at
// a time), and writes the orders, their audit rows and reservations in multi-row
// statements with one update of the stock row: about 6 round trips for the batch where
// one create at a time takes 5 per member, and the hot row is held for 3 of them. A
// refused member wrote nothing, so it fails no other and needs no savepoint. Two members
// with one idempotency key: the later one gets the earlier one's order (the same
// request) or EIDEMPOTENCY, as one at a time. It reports whether a member was refused.
// Errors: the database's, and ECONFLICT when an idempotency key was taken by another
// transaction since the look-up (the batch then runs one member at a time).
func (s *Service) createTogether(ctx context.Context, tx store.Tx, live []*createCall) (refused bool, err error) {
	now, err := tx.Now(ctx)
	if err != nil {
		return false, err
	}
	type member struct {
		c   *createCall
		ctx context.Context
		n   *newOrder
	}
	var fresh []*member
	for _, c := range live {
		m := &member{c: c, ctx: batchctx.Member(ctx, c.ctx)}
		if m.n, err = s.newOrder(m.ctx, tx, c.p, &CreateOptions{Now: now}); err != nil {
			if orderly.ErrorCode(err) == orderly.EINTERNAL {
				return false, err
			}
			c.err, refused = err, true
			continue
		}
		if m.n.replay != nil {
			c.o = m.n.replay
			continue
		}
		fresh = append(fresh, m)
	}
	if len(fresh) == 0 {
		return refused, nil
	}
	sku := fresh[0].c.p.Items[0].SKU
	available, _, err := tx.StockLockAvailable(ctx, sku)
	if err != nil {
		return false, err
	}
	var (
		orders    []*store.OrderInsertParams
		audits    []*orderly.Transition
		reserve   []*store.StockReserveParams
		written   []*member
		keyHolder = map[string]*member{} // user and idempotency key → the member writing them
	)
	for _, m := range fresh {
		p := m.c.p
		key := ""
		if p.IdempotencyKey != "" {
			key = p.UserID + "\x00" + p.IdempotencyKey
			if first := keyHolder[key]; first != nil {
				if first.n.hash == m.n.hash {
					replay := *first.n.order // a replay of an order this batch writes: its own copy, as read back
					m.c.o = &replay
				} else {
					m.c.err, refused = errKeyReused(p.IdempotencyKey), true
				}
				continue
			}
		}
		q := p.Items[0].Quantity
		if q > available {
			m.c.err, refused = errOutOfStock(sku, q), true
			continue
		}
		available -= q
		if key != "" {
			keyHolder[key] = m
		}
		o := m.n.order
		written = append(written, m)
		orders = append(orders, &store.OrderInsertParams{Order: o, IdempotencyKey: p.IdempotencyKey, RequestHash: m.n.hash, NoDeadline: !m.n.timed})
		audits = append(audits, m.n.audit(m.ctx, p))
		reserve = append(reserve, &store.StockReserveParams{OrderID: o.ID, SKU: sku, Quantity: q, Now: now})
	}
	if len(written) == 0 {
		return refused, nil
	}
	if err := s.cfg.Machine.Insert(ctx, tx, orders...); err != nil {
		return false, err
	}
	if err := tx.TransitionsInsertMany(ctx, audits); err != nil {
		return false, err
	}
	for _, m := range written {
		if err := keepTrace(m.ctx, tx, m.n.order.ID); err != nil {
			return false, err
		}
	}
	if err := tx.StockReserveMany(ctx, sku, reserve); err != nil {
		return false, err
	}
	for _, m := range written {
		m.c.o, m.c.created = m.n.order, true
	}
	return refused, nil
}
