package groupbuy_test

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

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

var dialects = []string{"sqlite", "postgres", "mysql"}

const (
	sku     = "SKU-G"
	initial = 100
	price   = 1500
	limit   = 600 // group time limit, seconds
	grace   = 30 * time.Second
)

// setup returns an engine on dialect with initial units of sku and a deal of min to max
// members at price, limit seconds to form.
func setup(t *testing.T, dialect string, minMembers, maxMembers int64) (*enginetest.Env, *orderly.Deal) {
	t.Helper()
	return setupWith(t, enginetest.Options{Dialect: dialect, GracePeriod: grace}, minMembers, maxMembers)
}

// setupWith is setup on an engine built from opts.
func setupWith(t *testing.T, opts enginetest.Options, minMembers, maxMembers int64) (*enginetest.Env, *orderly.Deal) {
	t.Helper()
	e := enginetest.New(t, opts)
	e.SetStock(t, sku, initial)
	d, err := e.Groups.CreateDeal(context.Background(), &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
		MinMembers: minMembers, MaxMembers: maxMembers, GroupTimeLimitSeconds: limit})
	if err != nil {
		t.Fatalf("create deal: %v", err)
	}
	return e, d
}

// open opens a group of deal d with user's order.
func open(t *testing.T, e *enginetest.Env, d *orderly.Deal, user string) (*orderly.Group, *orderly.Order) {
	t.Helper()
	g, o, created, err := e.Groups.OpenGroup(context.Background(), &orderly.JoinGroupParams{DealID: d.ID, UserID: user})
	if err != nil || !created {
		t.Fatalf("open group: created %v, %v", created, err)
	}
	return g, o
}

// join adds user to group g.
func join(t *testing.T, e *enginetest.Env, g *orderly.Group, user string) *orderly.Order {
	t.Helper()
	_, o, created, err := e.Groups.JoinGroup(context.Background(), &orderly.JoinGroupParams{GroupID: g.ID, UserID: user})
	if err != nil || !created {
		t.Fatalf("join group %s as %s: created %v, %v", g.ID, user, created, err)
	}
	return o
}

// startPay starts a payment attempt of o and captures it at the gateway; it returns the
// attempt and its success callback, not yet delivered.
func startPay(t *testing.T, e *enginetest.Env, o *orderly.Order) (*orderly.Payment, *orderly.Callback) {
	t.Helper()
	p, err := e.Payments.StartPayment(context.Background(), &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatalf("start payment of %s: %v", o.ID, err)
	}
	txn := "txn-" + p.ID
	if !e.Gateway.Capture(p.ID, txn) {
		t.Fatalf("capture %s", p.ID)
	}
	return p, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: txn, Amount: p.Amount, Currency: p.Currency,
		Status: orderly.CallbackSucceeded, OccurredAt: time.Now().UTC()}
}

// pay pays o: attempt, capture, callback.
func pay(t *testing.T, e *enginetest.Env, o *orderly.Order) *orderly.Payment {
	t.Helper()
	p, cb := startPay(t, e, o)
	res, err := e.Payments.HandleCallback(context.Background(), cb)
	if err != nil || !res.Applied || res.Refund {
		t.Fatalf("callback of %s: %+v, %v", o.ID, res, err)
	}
	return p
}

func group(t *testing.T, e *enginetest.Env, id string) *orderly.Group {
	t.Helper()
	g, err := e.Groups.Group(context.Background(), id)
	if err != nil {
		t.Fatalf("group %s: %v", id, err)
	}
	return g
}

// closeDue runs one claim-and-close pass as the sweep.
func closeDue(t *testing.T, e *enginetest.Env) closer.PassResult {
	t.Helper()
	res, err := e.Closer.CloseDue(context.Background(), closer.TriggerSweep)
	if err != nil {
		t.Fatalf("close due: %v", err)
	}
	return res
}

// events returns the flow events of an order's trail, in order.
func events(t *testing.T, e *enginetest.Env, id string) []string {
	t.Helper()
	var out []string
	for _, tr := range e.StateTrail(t, id) {
		out = append(out, fmt.Sprintf("%s-%s->%s", tr.From, tr.Event, tr.To))
	}
	return out
}

// assertRefundedOnce checks that the gateway moved exactly one refund of payment p, for
// its whole amount.
func assertRefundedOnce(t *testing.T, e *enginetest.Env, p *orderly.Payment) {
	t.Helper()
	if refunds := e.Gateway.Refunds(p.ID); len(refunds) != 1 || refunds[0].Amount != p.Amount {
		t.Fatalf("gateway refunds of payment %s: %+v, want exactly one of %d", p.ID, refunds, p.Amount)
	}
}

func forEachDialect(t *testing.T, test func(t *testing.T, dialect string)) {
	t.Helper()
	for _, dialect := range dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			test(t, dialect)
		})
	}
}

// TestGroupFailsAtDeadline: min 3, deadline D. Two members pay, a third joins and never
// pays. At D the closer fails the group: the unpaid order closes (group_failed, stock
// released), both paid members go group_failed → refunding and, once the gateway
// confirmed, refunded; each payment is refunded exactly once, nothing ships, and every
// unit is back in stock.
func TestGroupFailsAtDeadline(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		e, d := setup(t, dialect, 3, 5)
		g, leader := open(t, e, d, "u1")
		if want := enginetest.Start.Add(limit * time.Second); !g.DeadlineAt.Equal(want) || !leader.ExpiresAt.Equal(want) {
			t.Fatalf("deadline %s, leader pays by %s; want both %s", g.DeadlineAt, leader.ExpiresAt, want)
		}
		e.Clock.Advance(time.Second)
		second := join(t, e, g, "u2")
		third := join(t, e, g, "u3")
		if !second.ExpiresAt.Equal(g.DeadlineAt) || !second.CloseAt.Equal(g.DeadlineAt.Add(grace)) {
			t.Fatalf("member pays by %s, closes at %s; want the group deadline %s (+ grace)", second.ExpiresAt, second.CloseAt, g.DeadlineAt)
		}
		p1, p2 := pay(t, e, leader), pay(t, e, second)
		if got := group(t, e, g.ID); got.State != orderly.GroupForming || got.PaidMembers != 2 || got.SeatsTaken != 3 {
			t.Fatalf("before D: %s, %d paid, %d seats; want forming, 2, 3", got.State, got.PaidMembers, got.SeatsTaken)
		}
		if s := e.StockOf(t, sku); s.Available != initial-3 || s.Held != 1 || s.Sold != 2 {
			t.Fatalf("stock before D: %+v", s)
		}
		e.Clock.Set(g.DeadlineAt.Add(-time.Millisecond))
		if res := closeDue(t, e); res.Fired != 0 {
			t.Fatalf("1 ms before D: %d groups fired", res.Fired)
		}
		e.Clock.Set(g.DeadlineAt)
		if res := closeDue(t, e); res.Fired != 1 || res.Closed != 0 {
			t.Fatalf("at D: %+v, want 1 group fired and no order timeout (grace)", res)
		}
		got := group(t, e, g.ID)
		if got.State != orderly.GroupFailed || got.FailedAt == nil || !got.FailedAt.Equal(g.DeadlineAt) || got.SucceededAt != nil {
			t.Fatalf("after D: %+v", got)
		}
		if o := e.OrderOf(t, third.ID); o.State != orderly.StateClosed || o.CloseReason != groupbuy.CloseReasonGroupFailed {
			t.Fatalf("unpaid member: %s %s", o.State, o.CloseReason)
		}
		for _, o := range []*orderly.Order{leader, second} {
			if got := e.OrderOf(t, o.ID); got.State != orderly.StateRefunding || got.RefundedAmount != price {
				t.Fatalf("paid member %s after D: %s refunded %d", o.ID, got.State, got.RefundedAmount)
			}
		}
		e.Drain(t)
		for _, o := range []*orderly.Order{leader, second} {
			got := e.OrderOf(t, o.ID)
			if got.State != orderly.StateRefunded || got.PayStatus != orderly.PayRefunded {
				t.Fatalf("paid member %s: %s/%s, want refunded", o.ID, got.State, got.PayStatus)
			}
			want := []string{"pending_payment-pay->paid", "paid-group_fail->group_failed", "group_failed-refund->refunding", "refunding-refund_complete->refunded"}
			if ev := events(t, e, o.ID); !slices.Equal(ev, want) {
				t.Fatalf("trail of %s: %v, want %v", o.ID, ev, want)
			}
		}
		assertRefundedOnce(t, e, p1)
		assertRefundedOnce(t, e, p2)
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Fatalf("stock after the failure: %+v, want all %d available", s, initial)
		}
		// Nothing ships: a member of a failed group has no ship transition.
		if _, err := e.Orders.ApplyEvent(context.Background(), leader.ID, orderly.EventShip, "merchant", ""); orderly.ErrorCode(err) != orderly.EILLEGAL {
			t.Fatalf("ship a refunded member order: %v, want %s", err, orderly.EILLEGAL)
		}
		// A second pass finds nothing, and refunds nothing again.
		if res := closeDue(t, e); res.Fired != 0 || res.Closed != 0 {
			t.Fatalf("second pass: %+v", res)
		}
		e.Drain(t)
		assertRefundedOnce(t, e, p1)
	})
}

// TestUnpaidMembersCloseWithTheirGroup: with no grace period an unpaid member's payment
// deadline is its group's deadline to the millisecond; at that instant the group fails
// first, so the member closes as group_failed and keeps its seat in the failed group (it
// did not leave), instead of timing out as payment_timeout with its seat given up.
func TestUnpaidMembersCloseWithTheirGroup(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		e, d := setupWith(t, enginetest.Options{Dialect: dialect}, 3, 5)
		g, leader := open(t, e, d, "u1")
		second := join(t, e, g, "u2")
		if !second.CloseAt.Equal(g.DeadlineAt) {
			t.Fatalf("member closes at %s, want the group deadline %s", second.CloseAt, g.DeadlineAt)
		}
		pay(t, e, leader)
		e.Clock.Set(g.DeadlineAt)
		if res := closeDue(t, e); res.Fired != 1 || res.Closed != 0 {
			t.Fatalf("at D: %+v, want the group fired and no order timed out", res)
		}
		if o := e.OrderOf(t, second.ID); o.State != orderly.StateClosed || o.CloseReason != groupbuy.CloseReasonGroupFailed {
			t.Fatalf("unpaid member: %s %s, want closed group_failed", o.State, o.CloseReason)
		}
		got := group(t, e, g.ID)
		if got.State != orderly.GroupFailed || got.SeatsTaken != 2 {
			t.Fatalf("group after D: %s with %d seats taken, want failed with 2", got.State, got.SeatsTaken)
		}
		for _, m := range got.Members {
			if m.LeftAt != nil {
				t.Errorf("member %s of the failed group left at %s; nobody left", m.UserID, m.LeftAt)
			}
		}
		e.Drain(t)
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Fatalf("stock after the failure: %+v, want all %d available", s, initial)
		}
	})
}

// TestReturnsAfterSuccessVerify: members of a succeeded group may be refunded afterwards
// as any paid order (a return: a full refund by event, a partial one with restock), and
// verify agrees: the group succeeded with its members, their money adds up, no violation.
// verify reported both as violations (I4: the state group_succeeded was not known to hold
// a payment; G: "a succeeded group refunds none").
func TestReturnsAfterSuccessVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, d := setup(t, "sqlite", 2, 3)
	g, leader := open(t, e, d, "u1")
	second := join(t, e, g, "u2")
	pay(t, e, leader)
	pay(t, e, second)
	if got := group(t, e, g.ID); got.State != orderly.GroupSucceeded {
		t.Fatalf("group: %s, want succeeded", got.State)
	}
	e.Clock.Advance(time.Minute)
	if _, err := e.Orders.ApplyEvent(ctx, leader.ID, orderly.EventRefund, "merchant", ""); err != nil {
		t.Fatalf("refund the leader: %v", err)
	}
	if _, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: second.ID, Amount: price / 2,
		Items: []orderly.RefundItem{{SKU: sku, Quantity: 1}}, Restock: true, Reason: "return"}); err != nil {
		t.Fatalf("partial refund of the second member: %v", err)
	}
	e.Drain(t)
	if o := e.OrderOf(t, leader.ID); o.State != orderly.StateRefunded {
		t.Fatalf("leader: %s, want refunded", o.State)
	}
	if o := e.OrderOf(t, second.ID); o.State != groupbuy.StateGroupSucceeded || o.RefundedAmount != price/2 {
		t.Fatalf("second member: %s refunded %d, want group_succeeded with %d refunded", o.State, o.RefundedAmount, price/2)
	}
	// The refund event refunds money only, as in the standard flow (goods come back with
	// a refund naming its items and restock); the partial refund restocked its unit.
	if s := e.StockOf(t, sku); s.Sold != 1 || s.Available != initial-1 {
		t.Errorf("stock after the returns: %+v, want 1 sold (the leader's) and the second's unit back", s)
	}
	flows, err := orderly.NewFlows(orderly.StandardFlow, groupbuy.Flow)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Check(ctx, e.Store, verify.Options{Flows: flows, Groups: verify.ReadGroups, RequireDrained: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Groups["succeeded"] != 1 {
		t.Fatalf("verify: groups %v, violations:\n%s", rep.Groups, strings.Join(rep.Violations, "\n"))
	}
}

// TestLateCallbackAfterFailure: the third member pays before D (captured at the gateway)
// but its callback is processed after the group failed: the payment is refunded, the group
// stays failed with two paid members, and the order's history says why it closed.
func TestLateCallbackAfterFailure(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 3, 3)
		g, leader := open(t, e, d, "u1")
		second, third := join(t, e, g, "u2"), join(t, e, g, "u3")
		pay(t, e, leader)
		pay(t, e, second)
		p3, cb3 := startPay(t, e, third) // captured before D; the callback is late
		e.Clock.Set(g.DeadlineAt)
		if res := closeDue(t, e); res.Fired != 1 {
			t.Fatalf("at D: %+v", res)
		}
		res, err := e.Payments.HandleCallback(ctx, cb3)
		if err != nil || !res.Refund {
			t.Fatalf("late callback: %+v, %v; want a refund", res, err)
		}
		e.Drain(t)
		got := group(t, e, g.ID)
		if got.State != orderly.GroupFailed || got.PaidMembers != 2 {
			t.Fatalf("group: %s with %d paid, want failed with 2", got.State, got.PaidMembers)
		}
		o := e.OrderOf(t, third.ID)
		if o.State != orderly.StateClosed || o.CloseReason != groupbuy.CloseReasonGroupFailed {
			t.Fatalf("third member: %s %s", o.State, o.CloseReason)
		}
		trail := e.StateTrail(t, third.ID)
		if len(trail) != 1 || trail[0].Event != groupbuy.EventGroupFail || !strings.Contains(trail[0].Cause, "group "+g.ID+" failed") {
			t.Fatalf("history of the third member: %+v", trail)
		}
		if p, err := e.Payments.Payment(ctx, p3.ID); err != nil || p.State != orderly.PaymentRefunded {
			t.Fatalf("late payment: %+v, %v", p, err)
		}
		assertRefundedOnce(t, e, p3)
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Fatalf("stock: %+v", s)
		}
	})
}

// TestPaymentInFlightAtFailure: a member whose payment is in flight when the group fails
// is closed with the group, and its attempt is settled at the gateway after the failure's
// commit (payment.cancel), whether or not a callback ever arrives: an attempt the gateway
// captured with its callback lost is refunded, once; one still pending is cancelled, so
// that the buyer can no longer pay it.
func TestPaymentInFlightAtFailure(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 4, 4)
		g, leader := open(t, e, d, "u1")
		captured, pending := join(t, e, g, "u2"), join(t, e, g, "u3")
		pay(t, e, leader)
		pc, _ := startPay(t, e, captured) // captured before D; its callback never arrives
		pp, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: pending.ID})
		if err != nil {
			t.Fatal(err)
		}
		e.Clock.Set(g.DeadlineAt)
		if res := closeDue(t, e); res.Fired != 1 {
			t.Fatalf("at D: %+v", res)
		}
		e.Drain(t)
		for _, o := range []*orderly.Order{captured, pending} {
			if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.CloseReason != groupbuy.CloseReasonGroupFailed {
				t.Fatalf("member %s: %s %s, want closed group_failed", o.UserID, got.State, got.CloseReason)
			}
		}
		if p, err := e.Payments.Payment(ctx, pc.ID); err != nil || p.State != orderly.PaymentRefunded {
			t.Fatalf("captured attempt: %+v, %v; want refunded", p, err)
		}
		assertRefundedOnce(t, e, pc)
		if p, err := e.Payments.Payment(ctx, pp.ID); err != nil || p.State != orderly.PaymentFailed {
			t.Fatalf("pending attempt: %+v, %v; want failed (cancelled at the gateway)", p, err)
		}
		if got := e.OrderOf(t, pending.ID); got.PayStatus != orderly.PayFailed {
			t.Fatalf("member whose attempt was cancelled: pay_status %s, want failed", got.PayStatus)
		}
		if e.Gateway.Capture(pp.ID, "txn-too-late") {
			t.Fatal("the gateway still takes the pending attempt after the group failed")
		}
		if len(e.Gateway.Refunds(pp.ID)) != 0 {
			t.Fatalf("refunds of the cancelled attempt: %+v", e.Gateway.Refunds(pp.ID))
		}
	})
}

// TestLastSeatRace: two joins at once for the last seat: one gets it, the other is
// refused with EGROUPFULL, and the loser's stock is not held. Several rounds per dialect.
func TestLastSeatRace(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 2, 2)
		const rounds = 10
		for r := range rounds {
			g, _ := open(t, e, d, fmt.Sprintf("leader-%d", r))
			var (
				wg      sync.WaitGroup
				barrier = make(chan struct{})
				errs    [2]error
			)
			for i := range 2 {
				wg.Go(func() {
					<-barrier
					_, _, _, errs[i] = e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: fmt.Sprintf("u-%d-%d", r, i)})
				})
			}
			close(barrier)
			wg.Wait()
			codes := []string{orderly.ErrorCode(errs[0]), orderly.ErrorCode(errs[1])}
			slices.Sort(codes)
			if !slices.Equal(codes, []string{"", orderly.EGROUPFULL}) {
				t.Fatalf("round %d: %v (%v)", r, codes, errs)
			}
			if got := group(t, e, g.ID); got.SeatsTaken != 2 || len(got.Members) != 2 {
				t.Fatalf("round %d: %d seats, %d members", r, got.SeatsTaken, len(got.Members))
			}
		}
		if s := e.StockOf(t, sku); s.Held != 2*rounds || s.Available != initial-2*rounds {
			t.Fatalf("stock: %+v, want %d held", s, 2*rounds)
		}
		checkNoAborts(t, e)
	})
}

// TestPaymentsReachMinTogether: three payments at once bring a group to min_members:
// exactly one success; each order is paid once and moves to group_succeeded once.
func TestPaymentsReachMinTogether(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 3, 4)
		const rounds = 5
		for r := range rounds {
			g, leader := open(t, e, d, fmt.Sprintf("a-%d", r))
			orders := []*orderly.Order{leader, join(t, e, g, fmt.Sprintf("b-%d", r)), join(t, e, g, fmt.Sprintf("c-%d", r))}
			late := join(t, e, g, fmt.Sprintf("d-%d", r)) // holds a seat, pays after the success
			cbs := make([]*orderly.Callback, len(orders))
			for i, o := range orders {
				_, cbs[i] = startPay(t, e, o)
			}
			var (
				wg      sync.WaitGroup
				barrier = make(chan struct{})
				errs    = make([]error, len(cbs))
			)
			for i, cb := range cbs {
				wg.Go(func() {
					<-barrier
					var res *orderly.CallbackResult
					res, errs[i] = e.Payments.HandleCallback(ctx, cb)
					if errs[i] == nil && (!res.Applied || res.Refund) {
						errs[i] = fmt.Errorf("callback %d: %+v", i, res)
					}
				})
			}
			close(barrier)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d: callback %d: %v", r, i, err)
				}
			}
			got := group(t, e, g.ID)
			if got.State != orderly.GroupSucceeded || got.PaidMembers != 3 || got.SucceededAt == nil {
				t.Fatalf("round %d: group %+v", r, got)
			}
			want := []string{"pending_payment-pay->paid", "paid-group_succeed->group_succeeded"}
			for _, o := range orders {
				if ev := events(t, e, o.ID); !slices.Equal(ev, want) {
					t.Fatalf("round %d: trail of %s: %v, want %v", r, o.ID, ev, want)
				}
			}
			// The fourth member pays after the success and goes straight through; nobody
			// joins a succeeded group.
			if _, _, _, err := e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: fmt.Sprintf("e-%d", r)}); orderly.ErrorCode(err) != orderly.EGROUPNOTFORMING {
				t.Fatalf("round %d: join a succeeded group: %v", r, err)
			}
			pay(t, e, late)
			if ev := events(t, e, late.ID); !slices.Equal(ev, want) {
				t.Fatalf("round %d: trail of the late member: %v", r, ev)
			}
			// The deadline passes: nothing fails, nothing is refunded.
			e.Clock.Set(g.DeadlineAt.Add(grace))
			if res := closeDue(t, e); res.Fired != 0 {
				t.Fatalf("round %d: a succeeded group fired at its deadline: %+v", r, res)
			}
			if _, err := e.Orders.ApplyEvent(ctx, leader.ID, orderly.EventShip, "merchant", ""); err != nil {
				t.Fatalf("round %d: ship a member of a succeeded group: %v", r, err)
			}
		}
		e.Drain(t)
		if n := len(e.Gateway.Ledger()); n == 0 {
			t.Fatal("empty ledger")
		}
		for _, c := range e.Gateway.Ledger() {
			if c.Op == sim.GatewayRefund {
				t.Fatalf("a refund in a succeeded group: %+v", c)
			}
		}
		if s := e.StockOf(t, sku); s.Sold != 4*rounds || s.Held != 0 {
			t.Fatalf("stock: %+v", s)
		}
		checkNoAborts(t, e)
	})
}

// TestJoinAfterDeadline: with the closer stopped, a join 1 ms after the deadline is
// refused with EGROUPEXPIRED; the group still fails when the closer runs, and a join then
// is refused the same way.
func TestJoinAfterDeadline(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 2, 3)
		g, leader := open(t, e, d, "u1")
		e.Clock.Set(g.DeadlineAt.Add(time.Millisecond))
		_, _, _, err := e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: "u2"})
		if orderly.ErrorCode(err) != orderly.EGROUPEXPIRED {
			t.Fatalf("join 1 ms after the deadline: %v, want %s", err, orderly.EGROUPEXPIRED)
		}
		if got := group(t, e, g.ID); got.State != orderly.GroupForming || got.SeatsTaken != 1 {
			t.Fatalf("before the closer ran: %+v", got)
		}
		if s := e.StockOf(t, sku); s.Held != 1 {
			t.Fatalf("the refused join holds stock: %+v", s)
		}
		if res := closeDue(t, e); res.Fired != 1 {
			t.Fatalf("closer: %+v", res)
		}
		if got := group(t, e, g.ID); got.State != orderly.GroupFailed || !got.FailedAt.Equal(g.DeadlineAt.Add(time.Millisecond)) {
			t.Fatalf("after the closer ran: %+v", got)
		}
		if o := e.OrderOf(t, leader.ID); o.State != orderly.StateClosed || o.CloseReason != groupbuy.CloseReasonGroupFailed {
			t.Fatalf("leader: %s %s", o.State, o.CloseReason)
		}
		_, _, _, err = e.Groups.JoinGroup(ctx, &orderly.JoinGroupParams{GroupID: g.ID, UserID: "u2"})
		if orderly.ErrorCode(err) != orderly.EGROUPEXPIRED {
			t.Fatalf("join a group failed at its deadline: %v, want %s", err, orderly.EGROUPEXPIRED)
		}
	})
}

// TestPaymentsRaceFailure: the lock order. Members' success callbacks run at the same time
// as the failure of their group at its deadline, for several rounds: the pay path locks
// the group before the order, the failure locks the group before its orders, so on
// PostgreSQL and MariaDB no transaction is aborted for a deadlock, and whatever the
// interleaving every captured payment ends refunded exactly once and the group failed.
func TestPaymentsRaceFailure(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 4, 4)
		const rounds = 8
		for r := range rounds {
			e.Clock.Set(enginetest.Start.Add(time.Duration(r) * 2 * limit * time.Second))
			g, leader := open(t, e, d, fmt.Sprintf("a-%d", r))
			orders := []*orderly.Order{leader}
			for _, u := range []string{"b", "c", "d"} {
				orders = append(orders, join(t, e, g, fmt.Sprintf("%s-%d", u, r)))
			}
			payments := make([]*orderly.Payment, len(orders))
			cbs := make([]*orderly.Callback, len(orders))
			for i, o := range orders[:3] {
				payments[i], cbs[i] = startPay(t, e, o)
			}
			e.Clock.Set(g.DeadlineAt)
			var (
				wg      sync.WaitGroup
				barrier = make(chan struct{})
				errs    = make([]error, 4)
			)
			for i, cb := range cbs[:3] {
				wg.Go(func() {
					<-barrier
					_, errs[i] = e.Payments.HandleCallback(ctx, cb)
				})
			}
			wg.Go(func() {
				<-barrier
				_, errs[3] = e.Closer.CloseDue(ctx, closer.TriggerTimer)
			})
			close(barrier)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d: %d: %v", r, i, err)
				}
			}
			closeDue(t, e) // the failure, if the race ran it before the group was due… it was due: a no-op
			e.Drain(t)
			if got := group(t, e, g.ID); got.State != orderly.GroupFailed {
				t.Fatalf("round %d: group %s", r, got.State)
			}
			for _, p := range payments[:3] {
				assertRefundedOnce(t, e, p)
			}
			for _, o := range orders {
				if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed && got.State != orderly.StateRefunded {
					t.Fatalf("round %d: member %s is %s", r, o.ID, got.State)
				}
			}
		}
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Fatalf("stock: %+v", s)
		}
		checkNoAborts(t, e)
	})
}

// checkNoAborts fails the test when the database aborted a transaction for a deadlock.
func checkNoAborts(t *testing.T, e *enginetest.Env) {
	t.Helper()
	if n := e.Store.Aborts(); n != 0 {
		t.Fatalf("%d transactions were aborted for a deadlock or serialization failure", n)
	}
}

// TestLeaveAndSeatFree: an unpaid member who leaves is cancelled and frees the seat; a paid
// member who leaves is refunded in full (refunding → refunded) and frees the seat, the
// group counting one paid member less; a member order closed for non-payment frees its
// seat too, and the seat can be taken again.
func TestLeaveAndSeatFree(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, dialect string) {
		ctx := context.Background()
		e, d := setup(t, dialect, 3, 3)
		g, _ := open(t, e, d, "u1")
		unpaid, paid := join(t, e, g, "u2"), join(t, e, g, "u3")
		p := pay(t, e, paid)
		got, err := e.Groups.LeaveGroup(ctx, g.ID, "u2", "buyer", "")
		if err != nil || got.SeatsTaken != 2 || got.PaidMembers != 1 {
			t.Fatalf("unpaid leaves: %+v, %v", got, err)
		}
		if o := e.OrderOf(t, unpaid.ID); o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonBuyerCancelled {
			t.Fatalf("unpaid member after leaving: %s %s", o.State, o.CloseReason)
		}
		if got, err = e.Groups.LeaveGroup(ctx, g.ID, "u3", "buyer", ""); err != nil || got.SeatsTaken != 1 || got.PaidMembers != 0 {
			t.Fatalf("paid leaves: %+v, %v", got, err)
		}
		e.Drain(t)
		if o := e.OrderOf(t, paid.ID); o.State != orderly.StateRefunded {
			t.Fatalf("paid member after leaving: %s", o.State)
		}
		assertRefundedOnce(t, e, p)
		if _, err := e.Groups.LeaveGroup(ctx, g.ID, "u3", "buyer", ""); orderly.ErrorCode(err) != orderly.ENOTFOUND {
			t.Fatalf("leave twice: %v", err)
		}
		// A member order closed for non-payment (a deal whose members have 60 s to pay)
		// frees its seat while the group keeps forming.
		short, err := e.Groups.CreateDeal(ctx, &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
			MinMembers: 2, MaxMembers: 2, GroupTimeLimitSeconds: limit, MemberPaymentTimeoutSeconds: 60})
		if err != nil {
			t.Fatal(err)
		}
		g2, first := open(t, e, short, "v1")
		e.Clock.Set(first.CloseAt)
		if res := closeDue(t, e); res.Closed != 1 || res.Fired != 0 {
			t.Fatalf("payment timeout of a member: %+v", res)
		}
		if got := group(t, e, g2.ID); got.SeatsTaken != 0 || got.State != orderly.GroupForming || got.Members[0].LeftAt == nil {
			t.Fatalf("after the member's timeout: %+v", got)
		}
		join(t, e, g2, "v1") // the seat can be taken again
		e.Clock.Set(g.DeadlineAt)
		closeDue(t, e)
		e.Clock.Set(g2.DeadlineAt)
		closeDue(t, e)
		e.Drain(t)
		if s := e.StockOf(t, sku); s.Available != initial || s.Held != 0 || s.Sold != 0 {
			t.Fatalf("stock: %+v", s)
		}
	})
}

// TestGroupFailureLocksMembersFirst: two groups of one deal fail in one closer pass while
// another transaction — standing for a timeout close — holds the unpaid member order of
// the second group and then needs the deal's stock row. The closer must lock every member
// order it moves before it touches stock; failing the groups one after the other held the
// stock row after the first group and then waited for the second's member: a deadlock, one
// of the two aborted by the database (seen as "deadlock detected" in simulate runs on
// PostgreSQL). Dialects with row locks only: SQLite has one writer.
func TestGroupFailureLocksMembersFirst(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := &lockWatch{reached: make(chan struct{})}
			e := enginetest.New(t, enginetest.Options{Dialect: dialect, GracePeriod: grace, IdleInTransactionTimeout: 30 * time.Second,
				WrapStore: func(s store.Store) store.Store { w.Store = s; return w }})
			e.SetStock(t, sku, initial)
			d, err := e.Groups.CreateDeal(ctx, &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
				MinMembers: 3, MaxMembers: 3, GroupTimeLimitSeconds: limit})
			if err != nil {
				t.Fatal(err)
			}
			gA, a := open(t, e, d, "user-a")
			e.Clock.Advance(time.Millisecond) // A's deadline first: A fails first
			gB, b := open(t, e, d, "user-b")
			w.order.Store(b.ID)
			e.Clock.Set(gB.DeadlineAt)

			errRollback := errors.New("rolled back")
			holding := make(chan struct{})
			var holdOnce sync.Once
			other := make(chan error, 1)
			go func() {
				other <- e.Store.InTx(ctx, func(tx store.Tx) error {
					if _, err := tx.OrdersLock(ctx, []string{b.ID}); err != nil {
						return err
					}
					holdOnce.Do(func() { close(holding) }) // once: InTx runs fn again after an abort
					// The closer is about to lock b: failing group by group, it held the stock row.
					<-w.reached
					if _, err := tx.StockSet(ctx, sku, initial); err != nil {
						return err
					}
					return errRollback
				})
			}()
			<-holding
			res, err := e.Closer.CloseDue(ctx, closer.TriggerSweep)
			if oerr := <-other; !errors.Is(oerr, errRollback) {
				t.Errorf("the transaction holding %s: %v, want it to finish (and roll back)", b.ID, oerr)
			}
			if err != nil || res.Fired != 2 {
				t.Fatalf("close due: %+v, %v; want both groups failed in one pass", res, err)
			}
			if n := e.Store.Aborts(); n != 0 {
				t.Errorf("the database aborted %d transactions for a deadlock, want none", n)
			}
			for _, g := range []*orderly.Group{gA, gB} {
				if got := group(t, e, g.ID); got.State != orderly.GroupFailed {
					t.Errorf("group %s: %s, want failed", g.ID, got.State)
				}
			}
			for _, o := range []*orderly.Order{a, b} {
				if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.CloseReason != groupbuy.CloseReasonGroupFailed {
					t.Errorf("member order %s: %s %s, want closed group_failed", o.ID, got.State, got.CloseReason)
				}
			}
			if st := e.StockOf(t, sku); st.Available != initial || st.Held != 0 {
				t.Errorf("stock %+v, want %d available and none held", st, initial)
			}
		})
	}
}

// lockWatch is a store whose write transactions close reached just before the first
// statement that locks order (OrdersLock or OrdersTransition naming it).
type lockWatch struct {
	store.Store
	order   atomic.Value // string
	reached chan struct{}
	once    sync.Once
}

func (w *lockWatch) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return w.Store.InTx(ctx, func(tx store.Tx) error { return fn(&lockWatchTx{Tx: tx, w: w}) })
}

func (w *lockWatch) touches(ids []string) {
	if id, _ := w.order.Load().(string); id != "" && slices.Contains(ids, id) {
		w.once.Do(func() { close(w.reached) })
	}
}

type lockWatchTx struct {
	store.Tx
	w *lockWatch
}

func (t *lockWatchTx) OrdersLock(ctx context.Context, ids []string) ([]string, error) {
	t.w.touches(ids)
	return t.Tx.OrdersLock(ctx, ids)
}

func (t *lockWatchTx) OrdersTransition(ctx context.Context, p *store.OrdersTransitionParams) ([]string, error) {
	t.w.touches(p.IDs)
	return t.Tx.OrdersTransition(ctx, p)
}

// TestSuccessDatedUnderGroupLock: min 3. A and X paid; P's payment callback starts and
// waits for the group row; meanwhile X leaves (refunded) and B pays; then P's payment
// takes the group and succeeds it. The success is dated when the group row was held, after
// X's leave, not when P's transaction began: a succeeded group never shows a member who
// left after its success and was refunded (verify's group rule). Dialects with row locks
// only: on SQLite the waiting payment would hold the one writer.
func TestSuccessDatedUnderGroupLock(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			h := &groupHold{arrived: make(chan struct{}), release: make(chan struct{})}
			e := enginetest.New(t, enginetest.Options{Dialect: dialect, GracePeriod: grace, IdleInTransactionTimeout: 30 * time.Second,
				WrapStore: func(s store.Store) store.Store { h.Store = s; return h }})
			e.SetStock(t, sku, initial)
			d, err := e.Groups.CreateDeal(ctx, &orderly.CreateDealParams{SKU: sku, GroupPrice: price, Currency: "USD",
				MinMembers: 3, MaxMembers: 4, GroupTimeLimitSeconds: limit})
			if err != nil {
				t.Fatal(err)
			}
			g, a := open(t, e, d, "user-a")
			x, b, p := join(t, e, g, "user-x"), join(t, e, g, "user-b"), join(t, e, g, "user-p")
			pay(t, e, a)
			pay(t, e, x)
			_, cb := startPay(t, e, p)
			h.order.Store(p.ID)
			paid := make(chan error, 1)
			go func() { _, err := e.Payments.HandleCallback(ctx, cb); paid <- err }()
			<-h.arrived // P's transaction began (its Now read) and is about to lock the group
			e.Clock.Advance(time.Second)
			if _, err := e.Groups.LeaveGroup(ctx, g.ID, "user-x", "", ""); err != nil {
				t.Fatalf("X leaves: %v", err)
			}
			e.Clock.Advance(time.Second)
			pay(t, e, b)
			close(h.release)
			if err := <-paid; err != nil {
				t.Fatalf("P's callback: %v", err)
			}
			got := group(t, e, g.ID)
			if got.State != orderly.GroupSucceeded || got.SucceededAt == nil {
				t.Fatalf("group: %s, succeeded at %v; want succeeded", got.State, got.SucceededAt)
			}
			for _, m := range got.Members {
				if m.UserID == "user-x" && (m.LeftAt == nil || m.LeftAt.After(*got.SucceededAt)) {
					t.Errorf("X left at %v, the group succeeded at %s: a refunded member left after the success", m.LeftAt, got.SucceededAt)
				}
			}
			if want := enginetest.Start.Add(2 * time.Second); !got.SucceededAt.Equal(want) {
				t.Errorf("succeeded at %s, want %s (the clock when P's payment held the group)", got.SucceededAt, want)
			}
			for _, o := range []*orderly.Order{a, b, p} {
				if s := e.OrderOf(t, o.ID).State; s != groupbuy.StateGroupSucceeded {
					t.Errorf("member order %s: %s, want group_succeeded", o.ID, s)
				}
			}
		})
	}
}

// groupHold is a store whose write transactions stop just before they lock the group of
// order (GroupsLockByOrders naming it): arrived is closed, and they go on once release is.
type groupHold struct {
	store.Store
	order            atomic.Value // string
	arrived, release chan struct{}
	once             sync.Once
}

func (h *groupHold) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return h.Store.InTx(ctx, func(tx store.Tx) error { return fn(&groupHoldTx{Tx: tx, h: h}) })
}

type groupHoldTx struct {
	store.Tx
	h *groupHold
}

func (t *groupHoldTx) GroupsLockByOrders(ctx context.Context, ids []string) ([]string, error) {
	if id, _ := t.h.order.Load().(string); id != "" && slices.Contains(ids, id) {
		t.h.once.Do(func() { close(t.h.arrived) })
		<-t.h.release
	}
	return t.Tx.GroupsLockByOrders(ctx, ids)
}
