package groupbuy_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// instance opens another engine on e's database, with e's clock: one more instance of a
// cluster, with a connection pool and a closer of its own.
func instance(t *testing.T, e *enginetest.Env, name string, closeBatch int) *engine.Engine {
	t.Helper()
	in, err := engine.Open(context.Background(), engine.Config{
		DatabaseURL: e.Engine.Config().DatabaseURL, Now: e.Clock.Now, CallbackSecret: []byte("enginetest"),
		InstanceID: t.Name() + "/" + name, Gateway: e.Gateway, DatabaseMaxConns: 5, CloseBatchSize: closeBatch,
	}, features.All()...)
	if err != nil {
		t.Fatalf("open instance %s: %v", name, err)
	}
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	return in
}

// failHold is a store whose write transactions stop right after moving a group to failed,
// holding its row, until release is closed.
type failHold struct {
	store.Store
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *failHold) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return h.Store.InTx(ctx, func(tx store.Tx) error { return fn(&failHoldTx{Tx: tx, h: h}) })
}

type failHoldTx struct {
	store.Tx
	h *failHold
}

func (t *failHoldTx) GroupSetState(ctx context.Context, p *store.GroupSetStateParams) (bool, error) {
	ok, err := t.Tx.GroupSetState(ctx, p)
	if ok && err == nil && p.To == orderly.GroupFailed {
		t.h.once.Do(func() { close(t.h.held) })
		<-t.h.release
	}
	return ok, err
}

// assertFailedMembers checks that group g failed with its seats held and that each of the
// unpaid member orders closed group_failed.
func assertFailedMembers(t *testing.T, e *enginetest.Env, g *orderly.Group, unpaid []*orderly.Order) {
	t.Helper()
	got := group(t, e, g.ID)
	if got.State != orderly.GroupFailed || got.SeatsTaken != int64(len(unpaid)) {
		t.Errorf("group %s: %s with %d seats taken, want failed with %d", g.ID, got.State, got.SeatsTaken, len(unpaid))
	}
	for _, o := range unpaid {
		if o := e.OrderOf(t, o.ID); o.State != orderly.StateClosed || o.CloseReason != groupbuy.CloseReasonGroupFailed {
			t.Errorf("member order %s of group %s: %s %s, want closed group_failed", o.ID, g.ID, o.State, o.CloseReason)
		}
	}
}

// TestGroupDeadlineOutranksMemberTimeout: the members' payment deadlines are the group's
// deadline. At that instant one instance's closer fails the group and, before it locks the
// member orders, another instance's close pass runs: its group phase skips the claimed
// group, and its order phase must leave the members to the failure (closed group_failed,
// their seats kept), not close them payment_timeout. The old code closed them
// payment_timeout on PostgreSQL (the group's deadline outranked the members' only within
// one pass). Dialects with row locks only: SQLite has one writer.
func TestGroupDeadlineOutranksMemberTimeout(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := &failHold{held: make(chan struct{}), release: make(chan struct{})}
			e, d := setupWith(t, enginetest.Options{Dialect: dialect, IdleInTransactionTimeout: 30 * time.Second,
				WrapStore: func(s store.Store) store.Store { h.Store = s; return h }}, 3, 3)
			other := instance(t, e, "other", 0)
			g, leader := open(t, e, d, "u1")
			member := join(t, e, g, "u2")
			for _, o := range []*orderly.Order{leader, member} {
				if !o.CloseAt.Equal(g.DeadlineAt) {
					t.Fatalf("order %s closes at %s, want the group deadline %s", o.ID, o.CloseAt, g.DeadlineAt)
				}
			}
			e.Clock.Set(g.DeadlineAt)

			type result struct {
				res closer.PassResult
				err error
			}
			failing := make(chan result, 1)
			go func() {
				res, err := e.Closer.CloseDue(ctx, closer.TriggerSweep)
				failing <- result{res, err}
			}()
			select {
			case <-h.held:
			case r := <-failing:
				t.Fatalf("the failing pass ended without failing the group: %+v, %v", r.res, r.err)
			}
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := other.Closer().CloseDue(octx, closer.TriggerTimer)
			cancel()
			close(h.release)
			r := <-failing
			if err != nil || res.Closed != 0 || res.Fired != 0 {
				t.Errorf("the other instance's pass: %+v, %v; want no order closed and no group fired", res, err)
			}
			if r.err != nil || r.res.Fired != 1 {
				t.Errorf("the failing pass: %+v, %v; want the group fired", r.res, r.err)
			}
			assertFailedMembers(t, e, g, []*orderly.Order{leader, member})
			e.Drain(t)
			if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
				t.Errorf("stock after the failure: %+v, want all %d available", s, initial)
			}
		})
	}
}

// TestGroupDeadlineOutranksUnderConcurrency: 60 groups of three unpaid members, every
// member's payment deadline the groups' deadline; at it three instances run close passes
// at once, a few groups or orders per transaction, so group failures and order timeouts
// interleave. Every member must close group_failed, in a failed group that kept its seat;
// the old code closed some of them payment_timeout on PostgreSQL and MariaDB.
func TestGroupDeadlineOutranksUnderConcurrency(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		const (
			groups  = 60
			members = 3
			batch   = 7
		)
		e, d := setupWith(t, enginetest.Options{Dialect: dialect, CloseBatchSize: batch}, members+1, members+1)
		e.SetStock(t, sku, groups*members)
		closers := []*closer.Closer{e.Closer}
		if dialect != "sqlite" {
			for i := range 2 {
				closers = append(closers, instance(t, e, fmt.Sprint("instance-", i+1), batch).Closer())
			}
		}
		gs := make([]*orderly.Group, groups)
		unpaid := make([][]*orderly.Order, groups)
		for i := range gs {
			var leader *orderly.Order
			gs[i], leader = open(t, e, d, fmt.Sprintf("g%d-u0", i))
			unpaid[i] = []*orderly.Order{leader}
			for j := 1; j < members; j++ {
				unpaid[i] = append(unpaid[i], join(t, e, gs[i], fmt.Sprintf("g%d-u%d", i, j)))
			}
		}
		e.Clock.Set(gs[0].DeadlineAt)
		var (
			wg      sync.WaitGroup
			barrier = make(chan struct{})
			errs    = make([]error, 2*len(closers))
		)
		for i := range errs {
			c := closers[i%len(closers)]
			trigger := []string{closer.TriggerTimer, closer.TriggerSweep}[i/len(closers)]
			wg.Go(func() {
				<-barrier
				_, errs[i] = c.CloseDue(ctx, trigger)
			})
		}
		close(barrier)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("close pass %d: %v", i, err)
			}
		}
		wrong := 0
		for i, g := range gs {
			for _, o := range unpaid[i] {
				if got := e.OrderOf(t, o.ID); got.CloseReason != groupbuy.CloseReasonGroupFailed {
					wrong++
					t.Logf("member order %s of group %s: %s %s", o.ID, g.ID, got.State, got.CloseReason)
				}
			}
		}
		if wrong != 0 {
			t.Fatalf("%d of %d member orders did not close group_failed", wrong, groups*members)
		}
		for i, g := range gs {
			assertFailedMembers(t, e, g, unpaid[i])
		}
		e.Drain(t)
		if s := e.StockOf(t, sku); s.Available != groups*members || s.Held != 0 || s.Sold != 0 {
			t.Errorf("stock after the failures: %+v, want all %d available", s, groups*members)
		}
	})
}

// TestPaidLastLeaverEndsGroup: the only member of a forming group, who paid, leaves: the
// payment is refunded, the group counts no paid member and ends (failed, no seat taken)
// instead of staying forming under nobody; verify finds nothing wrong. Before, the group
// stayed forming until its deadline.
func TestPaidLastLeaverEndsGroup(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 2, 3)
		g, leader := open(t, e, d, "u1")
		p := pay(t, e, leader)
		got, err := e.Groups.LeaveGroup(ctx, g.ID, "u1", "buyer", "")
		if err != nil || got.State != orderly.GroupFailed || got.SeatsTaken != 0 || got.PaidMembers != 0 || got.FailedAt == nil {
			t.Fatalf("the only, paid member leaves: %+v, %v; want the group failed, no seat taken, no paid member", got, err)
		}
		e.Drain(t)
		if o := e.OrderOf(t, leader.ID); o.State != orderly.StateRefunded {
			t.Fatalf("the leaver's order: %s, want refunded", o.State)
		}
		assertRefundedOnce(t, e, p)
		flows, err := orderly.NewFlows(orderly.StandardFlow, groupbuy.Flow)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := verify.Check(ctx, e.Store, verify.Options{Flows: flows, Groups: verify.ReadGroups, RequireDrained: true})
		if err != nil || !rep.OK() {
			t.Fatalf("verify: %v, violations:\n%s", err, strings.Join(rep.Violations, "\n"))
		}
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Errorf("stock: %+v, want all %d available", s, initial)
		}
	})
}
