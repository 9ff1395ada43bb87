package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
)

func init() {
	RegisterFlow(flowGroupBuy, func() FlowDriver { return &groupFlow{} })
}

// groupFlow drives the group_buy flow (docs/flows/group-buy.md): deals of random sizes (min
// 2–4 members, max min..min+2, a group time limit of a few seconds), groups opened at the
// run's pace, members joining at random moments — some groups with one seat too many, so
// that the last two joins race for the last seat, some with one join just after the
// deadline — and each member paying on time, twice, at the group deadline ± a few ms,
// late, never, leaving (paid or not) or cancelling. After a group's deadline the merchant
// ships the kept orders of a succeeded group and tries to ship one of a failed group, which
// must be refused. Its checks are in groupbuy_check.go.
type groupFlow struct {
	*runner
	plan   *groupPlan
	dealOf map[*plannedDeal]*deal
	groups []*trackedGroup // by plan index; nil for groups that were not opened

	sent, created, errs, paidAcks, left, shipped, closedSeen atomic.Int64
	deadlineBefore, deadlineAfter                            atomic.Int64

	mu      sync.Mutex
	refused map[string]int // seat requests refused, by problem code
	// seatLatency is how long each seat request took to be answered, in ms.
	seatLatency []float64

	finalStock map[string]*orderly.Stock // filled by Settle
}

// trackedGroup is an opened group and its members. Its goroutines own it until the send
// phase ends; then Settle and Check read it.
type trackedGroup struct {
	pg      *plannedGroup
	opened  *group // as the open answer showed it
	members []*trackedMember
	final   *group
	mu      sync.Mutex // guards members while joins are under way
	notes   []string
	// refusals are the joins refused, judged at rest (judgeRefusal); guarded by mu.
	refusals []seatRefusal
	settled  bool
}

func (g *trackedGroup) note(format string, args ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.notes = append(g.notes, fmt.Sprintf(format, args...))
}

// trackedMember is a seat taken and what its member did.
type trackedMember struct {
	pm    *plannedMember
	order *orderly.Order // as created
	// sentAt is when the seat request was sent, for judging its refusals.
	sentAt   time.Time
	payments []*orderly.Payment
	// successID and successAt: the success callback the server acknowledged and when.
	successID     string
	successAt     time.Time
	unknownStarts int
	lateSent      bool // a late success callback was acknowledged
	leftAck       bool // the leave was acknowledged
	cancelled     bool // the cancel was acknowledged
	shipAck       bool // the ship was acknowledged
	seenClose     bool

	final         *orderly.Order
	finalPayments []*orderly.Payment
	finalRefunds  []*orderly.Refund
	settled       bool
}

// Plan draws the deals, the groups and their members.
func (g *groupFlow) Plan(run *runner, orders int) {
	g.runner = run
	g.plan = newGroupPlan(run.cfg.Seed, run.prefix, orders, run.cfg.GroupTimeLimit)
	g.groups = make([]*trackedGroup, len(g.plan.groups))
	g.dealOf = map[*plannedDeal]*deal{}
	g.refused = map[string]int{}
}

// Progress reports seats asked and taken, groups, paid members and leaves.
func (g *groupFlow) Progress() string {
	g.mu.Lock()
	refused := 0
	for _, n := range g.refused {
		refused += n
	}
	g.mu.Unlock()
	return fmt.Sprintf("seats %d/%d taken %d refused %d paid %d left %d shipped %d",
		g.sent.Load(), g.plan.members, g.created.Load(), refused, g.paidAcks.Load(), g.left.Load(), g.shipped.Load())
}

// Seed stocks every deal's SKU and creates the deals.
func (g *groupFlow) Seed(ctx context.Context, _ *runner) error {
	deals := g.plan.deals
	got := make([]*deal, len(deals))
	err := forEach(ctx, len(deals), g.cfg.Concurrency, func(ctx context.Context, i int) error {
		pd := deals[i]
		if err := g.c.setStock(ctx, pd.sku, pd.stock); err != nil {
			return err
		}
		st, err := g.c.stock(ctx, pd.sku)
		if err != nil {
			return err
		}
		if st.Available != pd.stock {
			return fmt.Errorf("sku %s: set available to %d, read back %d", pd.sku, pd.stock, st.Available)
		}
		g.stocked(pd.sku, st.Available+st.Held+st.Sold)
		d, err := g.c.createDeal(ctx, &dealRequest{SKU: pd.sku, GroupPrice: pd.price, Currency: currency,
			MinMembers: pd.min, MaxMembers: pd.max, GroupTimeLimitSeconds: int64(pd.limit / time.Second),
			MemberPaymentTimeoutSeconds: int64(pd.memberTimeout / time.Second)})
		if err != nil {
			return fmt.Errorf("create deal: %w", err)
		}
		if d.MinMembers != pd.min || d.MaxMembers != pd.max || d.GroupPrice != pd.price || d.SKU != pd.sku {
			return fmt.Errorf("deal %s answered %+v, asked for %s min %d max %d price %d", d.ID, d, pd.sku, pd.min, pd.max, pd.price)
		}
		got[i] = d
		return nil
	})
	if err != nil {
		return err
	}
	for i, pd := range deals {
		g.dealOf[pd] = got[i]
	}
	return nil
}

// Drive opens group i when its turn in the seat-request sequence comes (its leader is seat
// request k: at sendStart + k/rate) and plays its members on their own goroutines.
func (g *groupFlow) Drive(ctx context.Context, _ *runner) {
	var wg sync.WaitGroup
	defer wg.Wait()
	rate := g.rate(g.plan.members)
	k := 0
	for _, pg := range g.plan.groups {
		at := g.sendStart.Add(time.Duration(float64(k) / rate * float64(time.Second)))
		k += len(pg.members)
		if sleepUntil(ctx, at) != nil {
			return
		}
		wg.Go(func() { g.runGroup(ctx, pg) })
	}
}

// local converts a server time to this process's clock (the measured offset).
func (g *groupFlow) local(t time.Time) time.Time {
	return t.Add(-time.Duration(g.clock.OffsetMS * float64(time.Millisecond)))
}

// runGroup opens the group with its leader, sends the joins at their times, plays every
// member, and after the deadline plays the merchant.
func (g *groupFlow) runGroup(ctx context.Context, pg *plannedGroup) {
	leader := pg.members[0]
	tm, s := g.takeSeat(ctx, nil, leader)
	if tm == nil {
		return
	}
	tg := &trackedGroup{pg: pg, opened: s.Group, members: []*trackedMember{tm}}
	g.groups[pg.index] = tg
	opened := time.Now()
	deadline := g.local(s.Group.DeadlineAt)
	if s.Group.State != groupForming || s.Group.MinMembers != pg.deal.min || s.Group.MaxMembers != pg.deal.max ||
		s.Group.DeadlineAt.Sub(s.Group.CreatedAt) != pg.deal.limit {
		tg.note("HTTP: group %s opened %s, min %d max %d, deadline %s after creation; want forming, %d, %d, %s",
			s.Group.ID, s.Group.State, s.Group.MinMembers, s.Group.MaxMembers, s.Group.DeadlineAt.Sub(s.Group.CreatedAt),
			pg.deal.min, pg.deal.max, pg.deal.limit)
	}
	var wg sync.WaitGroup
	wg.Go(func() { g.play(ctx, tg, tm) })
	for _, pm := range pg.members[1:] {
		at := opened.Add(pm.joinAt)
		if pm.lateJoin {
			at = deadline.Add(pm.joinAt - pg.deal.limit)
		}
		wg.Go(func() {
			if sleepUntil(ctx, at) != nil {
				return
			}
			if m, _ := g.takeSeat(ctx, tg, pm); m != nil {
				tg.mu.Lock()
				tg.members = append(tg.members, m)
				tg.mu.Unlock()
				g.play(ctx, tg, m)
			}
		})
	}
	wg.Wait()
	g.merchant(ctx, tg, deadline)
}

// takeSeat opens the group (tg nil) or joins it. A refusal is counted and kept with its
// send and answer times, to be judged at rest against what the server's own state allowed
// (judgeRefusal); nil when no seat was taken.
func (g *groupFlow) takeSeat(ctx context.Context, tg *trackedGroup, pm *plannedMember) (*trackedMember, *seat) {
	g.sent.Add(1)
	key := fmt.Sprintf("%s-group-%d-seat-%d", g.prefix, pm.group.index, pm.index)
	req := &seatRequest{UserID: pm.user}
	groupID := ""
	if tg == nil {
		req.DealID = g.dealOf[pm.group.deal].ID
	} else {
		groupID = tg.opened.ID
	}
	sentAt := time.Now()
	s, err := g.c.takeSeat(ctx, groupID, req, key)
	answeredAt := time.Now()
	g.answered()
	if ctx.Err() == nil {
		g.mu.Lock()
		g.seatLatency = append(g.seatLatency, float64(answeredAt.Sub(sentAt))/float64(time.Millisecond))
		g.mu.Unlock()
	}
	if err != nil {
		var he *httpError
		switch {
		case ctx.Err() != nil:
			g.errs.Add(1)
		case errors.As(err, &he) && he.Status == http.StatusConflict && he.code() != "":
			g.mu.Lock()
			g.refused[he.code()]++
			g.mu.Unlock()
			if tg == nil {
				g.wrongRefusal("the leader of group %d (%s) was refused %s: opening a group is refused only for bad input or stock, and the deal's stock exceeds the plan's demand",
					pm.group.index, pm.behaviour, he.code())
				break
			}
			tg.mu.Lock()
			tg.refusals = append(tg.refusals, seatRefusal{pm: pm, code: he.code(), sentAt: sentAt, answeredAt: answeredAt})
			tg.mu.Unlock()
		default:
			g.errs.Add(1)
			g.httpProblem("seat %d of group %d (%s, %s): %v", pm.index, pm.group.index, groupID, pm.behaviour, err)
		}
		return nil, nil
	}
	g.created.Add(1)
	o := s.Order
	if o.Flow != flowGroupBuy || o.State != orderly.StatePendingPayment || o.UserID != pm.user ||
		o.Amount != pm.group.deal.price || o.CloseAt.Before(o.ExpiresAt) ||
		o.ExpiresAt.After(s.Group.DeadlineAt) || (tg != nil && s.Group.ID != tg.opened.ID) {
		g.httpProblem("seat %d of group %d: order %s is %s/%s of flow %q for %d, expires %s, close_at %s, group %s deadline %s; want a pending group_buy order for %d expiring by the group deadline",
			pm.index, pm.group.index, o.ID, o.State, o.PayStatus, o.Flow, o.Amount, formatTime(o.ExpiresAt), formatTime(o.CloseAt),
			s.Group.ID, formatTime(s.Group.DeadlineAt), pm.group.deal.price)
	}
	return &trackedMember{pm: pm, order: o, sentAt: sentAt}, s
}

// seatRefusal is a join the server refused (409), kept until the group is read at rest.
type seatRefusal struct {
	pm                 *plannedMember
	code               string
	sentAt, answeredAt time.Time // this process's clock
}

// judgeRefusal says why a refused join is one the server's own state did not allow, ""
// when it did. The server decided at some moment between sentAt and answeredAt; its state
// then is read back from the group at rest (gr, its members and their orders, by order id
// in orders), and every comparison excuses the clock margin in the server's favour:
//   - group-expired only when answered at or after the group deadline;
//   - group-not-forming only when the group had succeeded or failed by the answer (its
//     succeeded_at or failed_at no later than answeredAt): a group still forming then was
//     refused a seat it had to give (or answer group-full for);
//   - group-full only in a group planned with a seat too many, and only when the members
//     holding a seat at the answer (joined by answeredAt, neither left nor closed before
//     sentAt) were max_members;
//   - nothing else: stock is seeded above the plan's demand and every member is a new user.
func (g *groupFlow) judgeRefusal(gr *group, orders map[string]*orderly.Order, r seatRefusal) string {
	pm, margin := r.pm, g.margin
	answered := r.answeredAt.Add(margin) // the latest the server can have decided, on its clock converted to ours
	sent := r.sentAt.Add(-margin)        // the earliest
	switch r.code {
	case codeGroupExpired:
		if answered.Before(g.local(gr.DeadlineAt)) {
			return fmt.Sprintf("it was answered at %s, before the deadline %s (clock margin %s)",
				formatTime(r.answeredAt), formatTime(gr.DeadlineAt), margin)
		}
	case codeGroupNotForming:
		var ended *time.Time
		switch gr.State {
		case groupSucceeded:
			ended = gr.SucceededAt
		case groupFailed:
			ended = gr.FailedAt
		}
		if ended == nil || answered.Before(g.local(*ended)) {
			since := "is still forming"
			if ended != nil {
				since = fmt.Sprintf("was forming until it %s at %s", gr.State, formatTime(*ended))
			}
			return fmt.Sprintf("it was answered at %s and the group %s (clock margin %s)", formatTime(r.answeredAt), since, margin)
		}
	case codeGroupFull:
		if !pm.group.oversubscribed {
			return fmt.Sprintf("the plan asks for %d seats of %d", len(pm.group.members), pm.group.deal.max)
		}
		held := 0
		for _, m := range gr.Members {
			if g.local(m.JoinedAt).After(answered) || (m.LeftAt != nil && g.local(*m.LeftAt).Before(sent)) {
				continue
			}
			if o := orders[m.OrderID]; o != nil && o.ClosedAt != nil && g.local(*o.ClosedAt).Before(sent) {
				continue
			}
			held++
		}
		if held < gr.MaxMembers {
			return fmt.Sprintf("at most %d members held a seat between %s and %s, max_members %d (clock margin %s)",
				held, formatTime(r.sentAt), formatTime(r.answeredAt), gr.MaxMembers, margin)
		}
	default:
		return "no plan asks for it"
	}
	return ""
}

// play acts out a member's behaviour.
func (g *groupFlow) play(ctx context.Context, tg *trackedGroup, m *trackedMember) {
	pm := m.pm
	joined := time.Now()
	deadline := g.local(tg.opened.DeadlineAt)
	switch pm.behaviour {
	case memberPayOnTime, memberPayThenLeave:
		if p := g.startPayment(ctx, m, joined.Add(pm.payDelay)); p != nil {
			g.succeed(ctx, m, p, time.Now().Add(pm.callbackDelay), 1)
		}
		if pm.behaviour == memberPayThenLeave && m.successID != "" {
			g.leave(ctx, tg, m, time.Now().Add(pm.callbackDelay))
		}
	case memberPayTwice:
		if p := g.startPayment(ctx, m, joined.Add(pm.payDelay)); p != nil {
			g.succeed(ctx, m, p, time.Now().Add(pm.callbackDelay), twiceCount)
			g.succeed(ctx, m, p, time.Now().Add(duplicateLater/4), 1)
		}
	case memberPayAtDeadline:
		if p := g.startPayment(ctx, m, joined.Add(pm.payDelay)); p != nil {
			g.succeed(ctx, m, p, deadline.Add(pm.deadlineOffset), 1)
			if pm.deadlineOffset < 0 {
				g.deadlineBefore.Add(1)
			} else {
				g.deadlineAfter.Add(1)
			}
		}
	case memberPayLate:
		if p := g.startPayment(ctx, m, joined.Add(pm.payDelay)); p != nil {
			g.payLate(ctx, m, p)
		}
	case memberLeave:
		g.leave(ctx, tg, m, joined.Add(pm.payDelay))
	case memberCancel:
		if sleepUntil(ctx, joined.Add(pm.payDelay)) != nil {
			return
		}
		o, _, err := g.c.cancel(ctx, m.order.ID)
		var he *httpError
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &he) && he.code() == orderly.EILLEGAL && !time.Now().Before(g.local(m.order.ExpiresAt).Add(-g.margin)):
			// Sent at the payment deadline: the order may have closed first.
		case err != nil:
			tg.note("HTTP: cancel of member order %s: %v", m.order.ID, err)
		case o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonBuyerCancelled:
			tg.note("expect: cancel of member order %s answered %s/%s, want closed/buyer_cancelled", o.ID, o.State, o.CloseReason)
		default:
			m.cancelled = true
		}
	case memberNeverPay:
	}
}

// startPayment starts a payment of the member's order at the given time; nil when none
// was started (noted when the refusal is not explained by the deadline).
func (g *groupFlow) startPayment(ctx context.Context, m *trackedMember, at time.Time) *orderly.Payment {
	if sleepUntil(ctx, at) != nil {
		return nil
	}
	p, ambiguous, err := g.c.startPayment(ctx, m.order.ID)
	if ambiguous {
		m.unknownStarts++
	}
	var he *httpError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil
	case errors.As(err, &he) && he.code() == orderly.ENOTPAYABLE:
		// The group may have failed or the order closed (deadline, group failure): the
		// checks judge the order's end.
		return nil
	default:
		g.httpProblem("start payment for member order %s (%s): %v", m.order.ID, m.pm.behaviour, err)
		return nil
	}
	if p.Amount == 0 {
		p.Amount = m.order.Amount
	}
	if p.Currency == "" {
		p.Currency = m.order.Currency
	}
	m.payments = append(m.payments, p)
	return p
}

// succeed sends p's success callback n times in parallel at the given time.
func (g *groupFlow) succeed(ctx context.Context, m *trackedMember, p *orderly.Payment, at time.Time, n int) {
	if sleepUntil(ctx, at) != nil {
		return
	}
	body := encodeCallback(&callbackBody{PaymentID: p.ID, OrderID: m.order.ID, ChannelTxnID: g.prefix + "-txn-" + p.ID,
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: formatTime(time.Now())})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = g.c.callback(ctx, body) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	for _, err := range errs {
		if err != nil {
			g.httpProblem("success callback for payment %s of member order %s (%s): %v", p.ID, m.order.ID, m.pm.behaviour, err)
			return
		}
	}
	if m.successID == "" {
		m.successID, m.successAt = p.ID, time.Now()
		g.paidAcks.Add(1)
	}
}

// payLate waits until the member order left pending_payment, then sends the success
// callback as if the money had arrived later.
func (g *groupFlow) payLate(ctx context.Context, m *trackedMember, p *orderly.Payment) {
	const poll = 100 * time.Millisecond
	until := g.local(m.order.CloseAt).Add(g.cfg.Drain)
	for next := g.local(m.order.CloseAt); ; next = time.Now().Add(poll) {
		if sleepUntil(ctx, next) != nil {
			return
		}
		o, err := g.c.order(ctx, m.order.ID)
		if err != nil {
			if ctx.Err() == nil {
				g.httpProblem("poll member order %s: %v", m.order.ID, err)
			}
			return
		}
		if o.State == orderly.StateClosed {
			if !m.seenClose {
				m.seenClose = true
				g.closedSeen.Add(1)
			}
			break
		}
		if o.State != orderly.StatePendingPayment || time.Now().After(until) {
			return // checked at rest
		}
	}
	body := encodeCallback(&callbackBody{PaymentID: p.ID, OrderID: m.order.ID, ChannelTxnID: g.prefix + "-txn-" + p.ID,
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: formatTime(m.order.ExpiresAt.Add(lateOccurredBy))})
	if err := g.c.callback(ctx, body); err != nil {
		if ctx.Err() == nil {
			g.httpProblem("late success callback for payment %s of closed member order %s: %v", p.ID, m.order.ID, err)
		}
		return
	}
	m.lateSent = true
}

// leave asks to leave the group at the given time. 409 group-not-forming is accepted (the
// group ended first), so are 409 illegal-transition and 404 not-found once the member
// order's payment deadline passed, and 404 after a try whose answer was lost.
func (g *groupFlow) leave(ctx context.Context, tg *trackedGroup, m *trackedMember, at time.Time) {
	if sleepUntil(ctx, at) != nil {
		return
	}
	_, err := g.c.leaveGroup(ctx, tg.opened.ID, m.pm.user)
	var he *httpError
	switch {
	case ctx.Err() != nil:
	case err == nil:
		m.leftAck = true
		g.left.Add(1)
	case errors.As(err, &he) && he.code() == codeGroupNotForming:
		// The group succeeded or failed first: the member stays (checked at rest).
	case errors.As(err, &he) && he.code() == orderly.EILLEGAL:
		// The unpaid order closed first (payment deadline).
	case errors.As(err, &he) && he.code() == orderly.ENOTFOUND &&
		(he.Tries > 1 || !time.Now().Before(g.local(m.order.ExpiresAt).Add(-g.margin))):
		// Not a member any more: an earlier try whose answer was lost left the group (a
		// leave has no idempotency key), or the unpaid order closed at its payment deadline
		// and gave up its seat; the checks judge the order at rest.
	default:
		tg.note("HTTP: member %s (%s) leaving group %s: %v", m.pm.user, m.pm.behaviour, tg.opened.ID, err)
	}
}

// merchant waits for the group's deadline, reads the group, ships the kept orders of a
// succeeded group and tries to ship a paid order of a failed group, which must be refused.
func (g *groupFlow) merchant(ctx context.Context, tg *trackedGroup, deadline time.Time) {
	const poll = 100 * time.Millisecond
	until := deadline.Add(g.cfg.Drain)
	var gr *group
	for next := deadline; ; next = time.Now().Add(poll) {
		if sleepUntil(ctx, next) != nil {
			return
		}
		var err error
		if gr, err = g.c.group(ctx, tg.opened.ID); err != nil {
			if ctx.Err() == nil {
				g.httpProblem("read group %s: %v", tg.opened.ID, err)
			}
			return
		}
		if gr.State != groupForming || time.Now().After(until) {
			break
		}
	}
	tg.mu.Lock()
	members := append([]*trackedMember(nil), tg.members...)
	tg.mu.Unlock()
	for _, m := range members {
		var state orderly.State
		for _, gm := range gr.Members {
			if gm.OrderID == m.order.ID {
				state = gm.OrderState
			}
		}
		switch {
		case gr.State == groupSucceeded && state == stateGroupSucceeded:
			o, err := g.c.orderEvent(ctx, m.order.ID, orderly.EventShip, orderly.StateShipped)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				tg.note("HTTP: ship member order %s of succeeded group %s: %v", m.order.ID, gr.ID, err)
			case o.State != orderly.StateShipped:
				tg.note("HTTP: ship member order %s of succeeded group %s answered %s", m.order.ID, gr.ID, o.State)
			default:
				m.shipAck = true
				g.shipped.Add(1)
			}
		case gr.State == groupFailed && m.successID != "":
			o, err := g.c.orderEvent(ctx, m.order.ID, orderly.EventShip, orderly.StateShipped)
			var he *httpError
			switch {
			case ctx.Err() != nil:
			case err == nil:
				tg.note("G: member order %s of failed group %s was shipped (answered %s): nothing ships in a group that did not succeed", m.order.ID, gr.ID, o.State)
				m.shipAck = true
			case errors.As(err, &he) && he.code() == orderly.EILLEGAL:
			default:
				tg.note("HTTP: ship member order %s of failed group %s: %v, want 409 illegal-transition", m.order.ID, gr.ID, err)
			}
			return // one try per failed group
		}
	}
}
