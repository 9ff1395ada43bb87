package groupbuy_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// holdGroup locks group id in a transaction of its own and keeps it until the returned
// function is called (which waits for that transaction to end and fails the test if it
// failed): another transaction that waits for the group row waits until then.
func holdGroup(t *testing.T, e *enginetest.Env, id string) (release func()) {
	t.Helper()
	holding, done := make(chan struct{}), make(chan error, 1)
	stop := make(chan struct{})
	var once sync.Once
	go func() {
		done <- e.Store.InTx(context.Background(), func(tx store.Tx) error {
			if _, err := tx.GroupLock(context.Background(), id); err != nil {
				return err
			}
			once.Do(func() { close(holding) })
			<-stop
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-done:
		t.Fatalf("lock group %s: %v", id, err)
	}
	return func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("the transaction holding group %s: %v", id, err)
		}
	}
}

// noWait bounds a request that must not wait for the held group row: past it, the request
// fails with its context's error instead of its own answer. It is far longer than the
// request takes when it does not wait, and shorter than the holding transaction's
// idle-in-transaction timeout (30 s here), so a request that waits fails on noWait.
const noWait = 3 * time.Second

// TestNoWaitOnHeldGroup: requests that cannot change a group do not queue behind the
// transaction holding its row (on PostgreSQL and MariaDB; SQLite has one writer): a join
// or a leave after the group's deadline is refused from a plain read, and a duplicate
// success callback of a member who paid is answered as a duplicate without taking the
// group. Before, the join and the leave locked the group first and waited (under load,
// behind a failure holding hundreds of groups: seconds).
func TestNoWaitOnHeldGroup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// run sends the request against group g (u1 the leader, u2 a paid member whose
		// success callback is cb) while g is held; it returns the request's error.
		run  func(ctx context.Context, e *enginetest.Env, g *orderly.Group, cb *orderly.Callback) error
		want string // error code; "" for success
	}{
		{"join after the deadline", func(ctx context.Context, e *enginetest.Env, g *orderly.Group, _ *orderly.Callback) error {
			e.Clock.Set(g.DeadlineAt.Add(time.Millisecond))
			_, _, _, err := e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: "u3", IdempotencyKey: "k3"})
			return err
		}, orderly.EGROUPEXPIRED},
		{"leave after the deadline", func(ctx context.Context, e *enginetest.Env, g *orderly.Group, _ *orderly.Callback) error {
			e.Clock.Set(g.DeadlineAt)
			_, err := e.Groups.LeaveGroup(ctx, g.ID, "u1", "", "")
			return err
		}, orderly.EGROUPNOTFORMING},
		{"duplicate success callback", func(ctx context.Context, e *enginetest.Env, _ *orderly.Group, cb *orderly.Callback) error {
			res, err := e.Payments.HandleCallback(ctx, cb)
			if err == nil && (res.Applied || res.Refund) {
				return errors.New("the duplicate was applied again")
			}
			return err
		}, ""},
	}
	for _, dialect := range []string{"postgres", "mysql"} {
		for _, tc := range cases {
			t.Run(dialect+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				// The holding transaction sits idle while the request runs: the default
				// 1 s idle-in-transaction timeout would end it whenever a loaded machine
				// (CI under -race) takes that long for a request that does not wait.
				e, d := setupWith(t, enginetest.Options{Dialect: dialect, GracePeriod: grace,
					IdleInTransactionTimeout: 30 * time.Second}, 3, 4)
				g, _ := open(t, e, d, "u1")
				p, cb := startPay(t, e, join(t, e, g, "u2"))
				if res, err := e.Payments.HandleCallback(context.Background(), cb); err != nil || !res.Applied {
					t.Fatalf("first callback: %+v, %v", res, err)
				}
				release := holdGroup(t, e, g.ID)
				ctx, cancel := context.WithTimeout(context.Background(), noWait)
				err := tc.run(ctx, e, g, cb)
				cancel()
				release()
				if got := orderly.ErrorCode(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
					t.Fatalf("with the group row held: %v (code %q), want %q without waiting for the row", err, got, tc.want)
				}
				if got := group(t, e, g.ID); got.State != orderly.GroupForming || got.PaidMembers != 1 || got.SeatsTaken != 2 {
					t.Errorf("group after: %s, %d paid, %d seats; want forming, 1 paid, 2 seats", got.State, got.PaidMembers, got.SeatsTaken)
				}
				if pay, err := e.Payments.Payment(context.Background(), p.ID); err != nil || pay.State != orderly.PaymentSucceeded {
					t.Errorf("payment of u2: %+v, %v; want succeeded", pay, err)
				}
			})
		}
	}
}

// TestJoinReservesStockLast: a join writes its member row and reads its group back before
// it reserves the deal's stock, so that the stock row, which every create, payment and
// close of the SKU updates, is held from the last statement to the commit only.
func TestJoinReservesStockLast(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		log := &callLog{}
		e := enginetest.New(t, enginetest.Options{Dialect: dialect, GracePeriod: grace,
			WrapStore: func(s store.Store) store.Store { log.Store = s; return log }})
		e.SetStock(t, sku, initial)
		d, err := e.Groups.CreateDeal(context.Background(), &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
			MinMembers: 2, MaxMembers: 3, GroupTimeLimitSeconds: limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			name string
			do   func() (*orderly.Group, error)
		}{
			{"open", func() (*orderly.Group, error) {
				g, _, _, err := e.Groups.OpenGroup(context.Background(), &orderly.JoinGroupParams{DealID: d.ID, UserID: "u1"})
				return g, err
			}},
			{"join", func() (*orderly.Group, error) {
				g, _, _, err := e.Groups.JoinGroup(context.Background(), &orderly.JoinGroupParams{GroupID: log.group, UserID: "u2"})
				return g, err
			}},
		} {
			log.reset()
			g, err := step.do()
			if err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
			log.group = g.ID
			calls := log.get()
			// An open knows its one member without reading it back.
			want := []string{"GroupMemberInsert", "GroupMembers", "StockReserve"}
			if step.name == "open" {
				want = []string{"GroupMemberInsert", "StockReserve"}
			}
			var got []string
			for _, c := range calls {
				if slices.Contains(want, c) {
					got = append(got, c)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: calls %v, want %v in this order (stock last)", step.name, calls, want)
			}
			if i := slices.Index(calls, "StockReserve"); i < 0 || i != len(calls)-1 {
				t.Errorf("%s: calls %v, want StockReserve the last statement", step.name, calls)
			}
			if len(g.Members) != int(g.SeatsTaken) || g.Members[len(g.Members)-1].UserID != map[string]string{"open": "u1", "join": "u2"}[step.name] {
				t.Errorf("%s: answered group %+v without its new member", step.name, g)
			}
		}
		if s := e.StockOf(t, sku); s.Held != 2 || s.Available != initial-2 {
			t.Errorf("stock %+v, want 2 held", s)
		}
	})
}

// TestSeatCalls: the store calls of opening and joining a group with an idempotency key,
// as the HTTP API sends them. A deal never changes, so it is read at most once per
// process; a join checks the idempotency key before the lock only when the group refuses
// it (a replay of an applied join is answered whatever the group's state), reads no seat
// of its user unless the group is full (the member row's unique seat refuses a second
// one), and reads back the members only; an open reads nothing back. Before: 14 calls a
// join, 10 an open (about 20 and 13 statements on PostgreSQL, with the transactions'
// BEGIN and COMMIT); now 10 and 8 (16 and 10).
func TestSeatCalls(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		log := &callLog{}
		e := enginetest.New(t, enginetest.Options{Dialect: dialect, GracePeriod: grace,
			WrapStore: func(s store.Store) store.Store { log.Store = s; return log }})
		e.SetStock(t, sku, initial)
		d, err := e.Groups.CreateDeal(ctx, &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
			MinMembers: 2, MaxMembers: 3, GroupTimeLimitSeconds: limit})
		if err != nil {
			t.Fatal(err)
		}
		log.reset()
		g, _, created, err := e.Groups.OpenGroup(ctx, &orderly.JoinGroupParams{DealID: d.ID, UserID: "u1", IdempotencyKey: "k1"})
		if err != nil || !created {
			t.Fatalf("open: %v, created %v", err, created)
		}
		if got, want := log.get(), []string{"InTx", "OrderGetByIdempotencyKey", "Now", "GroupInsert", "OrderInsert", "TransitionInsert",
			"GroupMemberInsert", "StockReserve"}; !slices.Equal(got, want) {
			t.Errorf("open: calls %v, want %v", got, want)
		}
		if got := group(t, e, g.ID); got.SeatsTaken != g.SeatsTaken || got.Version != g.Version || len(got.Members) != 1 ||
			*got.Members[0] != *g.Members[0] || !got.CreatedAt.Equal(g.CreatedAt) || !got.DeadlineAt.Equal(g.DeadlineAt) {
			t.Errorf("open answered %+v (member %+v), the group reads %+v (member %+v)", g, g.Members[0], got, got.Members[0])
		}
		log.reset()
		g2, _, created, err := e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: "u2", IdempotencyKey: "k2"})
		if err != nil || !created {
			t.Fatalf("join: %v, created %v", err, created)
		}
		if got, want := log.get(), []string{"Read", "GroupGet", "Now", "InTx", "GroupLock", "OrderGetByIdempotencyKey", "Now",
			"OrderInsert", "TransitionInsert", "GroupMemberInsert", "GroupMembers", "StockReserve"}; !slices.Equal(got, want) {
			t.Errorf("join: calls %v, want %v", got, want)
		}
		if got := group(t, e, g.ID); got.SeatsTaken != 2 || g2.SeatsTaken != 2 || len(g2.Members) != 2 || g2.Members[1].UserID != "u2" {
			t.Errorf("join answered %d seats, members %d; the group reads %d seats", g2.SeatsTaken, len(g2.Members), got.SeatsTaken)
		}
		// A user who holds a seat already is refused with its own type (EALREADYMEMBER):
		// by the unique seat while seats are free, by the read of its seat once the group
		// is full; another user then gets EGROUPFULL.
		for _, tc := range []struct {
			user, want string
		}{{"u1", orderly.EALREADYMEMBER}, {"u3", ""}, {"u2", orderly.EALREADYMEMBER}, {"u4", orderly.EGROUPFULL}} {
			_, _, _, err := e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: tc.user})
			if orderly.ErrorCode(err) != tc.want || (tc.want == "" && err != nil) {
				t.Errorf("join of %s: %v, want %q", tc.user, err, tc.want)
			}
		}
		if got := group(t, e, g.ID); got.SeatsTaken != 3 || len(got.Members) != 3 {
			t.Errorf("group %+v: want 3 seats taken by u1, u2, u3", got)
		}
		if s := e.StockOf(t, sku); s.Held != 3 || s.Available != initial-3 {
			t.Errorf("stock %+v, want 3 held", s)
		}
	})
}

// TestGroupFailuresTakeStockLast: a transaction that fails several groups at their
// deadline releases the stock of all their unpaid members with one call, after every other
// write of the batch (the paid members' refunds, the audit rows, the events), followed
// only by the coupons: the deals' stock rows, which every join and payment of those deals
// waits for, are held from there to the commit, and taken in SKU order (one set-based
// move) as every other transaction takes them.
func TestGroupFailuresTakeStockLast(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		log := &callLog{}
		e := enginetest.New(t, enginetest.Options{Dialect: dialect, GracePeriod: grace,
			WrapStore: func(s store.Store) store.Store { log.Store = s; return log }})
		e.SetStock(t, "SKU-A", initial)
		e.SetStock(t, "SKU-B", initial)
		var unpaid []string // by deadline: SKU-B, SKU-A, SKU-B
		var paid *orderly.Order
		for i, s := range []string{"SKU-B", "SKU-A", "SKU-B"} {
			d, err := e.Groups.CreateDeal(ctx, &orderly.CreateDealParams{SKU: s, GroupPrice: price, Currency: "USD",
				MinMembers: 3, MaxMembers: 3, GroupTimeLimitSeconds: limit})
			if err != nil {
				t.Fatal(err)
			}
			g, o := open(t, e, d, "u"+string(rune('1'+i)))
			unpaid = append(unpaid, o.ID)
			if i == 1 {
				paid = join(t, e, g, "p1")
				pay(t, e, paid)
			}
			e.Clock.Advance(time.Millisecond)
		}
		e.Drain(t)
		e.Clock.Advance(limit * time.Second)
		log.reset()
		if res := closeDue(t, e); res.Fired != 3 {
			t.Fatalf("closer: %+v, want 3 groups failed", res)
		}
		calls := log.get()
		slices.Sort(unpaid)
		release := slices.Index(calls, "ReservationsReleaseMany:"+strings.Join(unpaid, ","))
		var tail []string // the rest of the failure's transaction (another starts at InTx)
		if release >= 0 {
			tail = calls[release+1:]
			if next := slices.Index(tail, "InTx"); next >= 0 {
				tail = tail[:next]
			}
		}
		if release < 0 || slices.ContainsFunc(tail, func(c string) bool { return c != "CouponsRelease" }) {
			t.Fatalf("calls of the failure: %v; want one release of %v after every other write, then only coupons", calls, unpaid)
		}
		if n := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "ReservationsReleaseMany:") }); n != release {
			t.Errorf("calls of the failure: %v; want a single release", calls)
		}
		if !slices.Contains(calls[:release], "OutboxInsert") || !slices.Contains(calls[:release], "OrdersTransition") {
			t.Errorf("calls of the failure: %v; want the transitions and events before the release", calls)
		}
		for _, s := range []string{"SKU-A", "SKU-B"} {
			if st := e.StockOf(t, s); st.Held != 0 {
				t.Errorf("stock of %s after the failure: %+v, want none held", s, st)
			}
		}
		e.Drain(t)
		for _, s := range []string{"SKU-A", "SKU-B"} {
			if st := e.StockOf(t, s); st.Held != 0 || st.Sold != 0 || st.Available != initial {
				t.Errorf("stock of %s after the refund: %+v, want all %d back", s, st, initial)
			}
		}
		if o := e.OrderOf(t, paid.ID); o.State != orderly.StateRefunded {
			t.Errorf("paid member: %s, want refunded", o.State)
		}
	})
}

// TestGroupPaymentTakesStockLast: the payment that makes a group succeed counts itself in
// the group, moves the group and its paid members and writes their events before it
// commits its reservation: the deal's stock row is held from there to the commit.
func TestGroupPaymentTakesStockLast(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		log := &callLog{}
		e, d := setupWith(t, enginetest.Options{Dialect: dialect, GracePeriod: grace,
			WrapStore: func(s store.Store) store.Store { log.Store = s; return log }}, 2, 2)
		g, leader := open(t, e, d, "u1")
		second := join(t, e, g, "u2")
		pay(t, e, leader)
		log.reset()
		pay(t, e, second)
		calls := log.get()
		commit := slices.Index(calls, "ReservationsCommit")
		if commit < 0 {
			t.Fatalf("calls of the payment: %v; want a commit of its reservation", calls)
		}
		tail := calls[commit+1:]
		if next := slices.Index(tail, "InTx"); next >= 0 {
			tail = tail[:next]
		}
		if slices.ContainsFunc(tail, func(c string) bool { return c != "CouponUse" }) {
			t.Errorf("calls of the payment: %v; want only the coupon after the commit", calls)
		}
		if !slices.Contains(calls[:commit], "GroupSetState") {
			t.Errorf("calls of the payment: %v; want the group's success before the commit", calls)
		}
		if got := group(t, e, g.ID); got.State != orderly.GroupSucceeded {
			t.Fatalf("group: %s, want succeeded", got.State)
		}
		if s := e.StockOf(t, sku); s.Held != 0 || s.Sold != 2 {
			t.Fatalf("stock %+v, want 2 sold", s)
		}
	})
}

// callLog is a store whose write transactions record some of their calls, in order:
// GroupMemberInsert, GroupMembers, StockReserve, OrdersTransition, OutboxInsert,
// CouponsRelease, "ReservationsReleaseMany:<ids, sorted, comma-separated>" for each release.
type callLog struct {
	store.Store
	group string // the group the test works on (set by the test)
	mu    sync.Mutex
	calls []string
}

func (l *callLog) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	l.add("InTx")
	return l.Store.InTx(ctx, func(tx store.Tx) error { return fn(&callLogTx{Tx: tx, l: l}) })
}

func (l *callLog) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	l.add("Read")
	return l.Store.Read(ctx, func(tx store.Tx) error { return fn(&callLogTx{Tx: tx, l: l}) })
}

func (l *callLog) add(calls ...string) {
	l.mu.Lock()
	l.calls = append(l.calls, calls...)
	l.mu.Unlock()
}

func (l *callLog) reset() {
	l.mu.Lock()
	l.calls = nil
	l.mu.Unlock()
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

type callLogTx struct {
	store.Tx
	l *callLog
}

func (t *callLogTx) GroupMemberInsert(ctx context.Context, m *orderly.GroupMember) error {
	t.l.add("GroupMemberInsert")
	return t.Tx.GroupMemberInsert(ctx, m)
}

func (t *callLogTx) GroupGet(ctx context.Context, id string) (*orderly.Group, error) {
	t.l.add("GroupGet")
	return t.Tx.GroupGet(ctx, id)
}

func (t *callLogTx) GroupLock(ctx context.Context, id string) (*orderly.Group, error) {
	t.l.add("GroupLock")
	return t.Tx.GroupLock(ctx, id)
}

func (t *callLogTx) GroupInsert(ctx context.Context, g *orderly.Group) error {
	t.l.add("GroupInsert")
	return t.Tx.GroupInsert(ctx, g)
}

func (t *callLogTx) GroupMemberSeat(ctx context.Context, groupID, userID string) (*orderly.GroupMember, error) {
	t.l.add("GroupMemberSeat")
	return t.Tx.GroupMemberSeat(ctx, groupID, userID)
}

func (t *callLogTx) DealGet(ctx context.Context, id string) (*orderly.Deal, error) {
	t.l.add("DealGet")
	return t.Tx.DealGet(ctx, id)
}

func (t *callLogTx) Now(ctx context.Context) (time.Time, error) {
	t.l.add("Now")
	return t.Tx.Now(ctx)
}

func (t *callLogTx) OrderGetByIdempotencyKey(ctx context.Context, userID, key string) (*orderly.Order, string, error) {
	t.l.add("OrderGetByIdempotencyKey")
	return t.Tx.OrderGetByIdempotencyKey(ctx, userID, key)
}

func (t *callLogTx) OrderInsert(ctx context.Context, p *store.OrderInsertParams) error {
	t.l.add("OrderInsert")
	return t.Tx.OrderInsert(ctx, p)
}

func (t *callLogTx) TransitionInsert(ctx context.Context, tr *orderly.Transition) error {
	t.l.add("TransitionInsert")
	return t.Tx.TransitionInsert(ctx, tr)
}

func (t *callLogTx) GroupMembers(ctx context.Context, groupID string) ([]*orderly.GroupMember, error) {
	t.l.add("GroupMembers")
	return t.Tx.GroupMembers(ctx, groupID)
}

func (t *callLogTx) StockReserve(ctx context.Context, p *store.StockReserveParams) (bool, error) {
	t.l.add("StockReserve")
	return t.Tx.StockReserve(ctx, p)
}

func (t *callLogTx) ReservationsReleaseMany(ctx context.Context, ids []string, now time.Time) ([]*orderly.Reservation, error) {
	t.l.add("ReservationsReleaseMany:" + strings.Join(slices.Sorted(slices.Values(ids)), ","))
	return t.Tx.ReservationsReleaseMany(ctx, ids, now)
}

func (t *callLogTx) OrdersTransition(ctx context.Context, p *store.OrdersTransitionParams) ([]string, error) {
	t.l.add("OrdersTransition")
	return t.Tx.OrdersTransition(ctx, p)
}

func (t *callLogTx) OutboxInsert(ctx context.Context, msgs []*store.OutboxInsertParams) error {
	t.l.add("OutboxInsert")
	return t.Tx.OutboxInsert(ctx, msgs)
}

func (t *callLogTx) ReservationsCommit(ctx context.Context, orderID string, now time.Time) ([]*orderly.Reservation, error) {
	t.l.add("ReservationsCommit")
	return t.Tx.ReservationsCommit(ctx, orderID, now)
}

func (t *callLogTx) ReservationsCommitMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error) {
	t.l.add("ReservationsCommit")
	return t.Tx.ReservationsCommitMany(ctx, orderIDs, now)
}

func (t *callLogTx) GroupSetState(ctx context.Context, p *store.GroupSetStateParams) (bool, error) {
	t.l.add("GroupSetState")
	return t.Tx.GroupSetState(ctx, p)
}

func (t *callLogTx) CouponUse(ctx context.Context, couponID, orderID string) (bool, error) {
	t.l.add("CouponUse")
	return t.Tx.CouponUse(ctx, couponID, orderID)
}

func (t *callLogTx) CouponsRelease(ctx context.Context, refs []orderly.CouponRef, now time.Time) (int64, error) {
	t.l.add("CouponsRelease")
	return t.Tx.CouponsRelease(ctx, refs, now)
}
