package simulate

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
)

// groupFaults are the group-buy rules a fake server breaks on purpose.
type groupFaults struct {
	// refundSucceeded refunds the first paying member of every group that succeeds.
	refundSucceeded bool
	// shipAnywhere ships any order on request, whatever its state or group.
	shipAnywhere bool
	// failEarly fails groups this long before their deadline.
	failEarly time.Duration
	// refuseForming answers the first join of every forming group group-not-forming.
	refuseForming bool
	// fullEarly answers group-full with one seat still free.
	fullEarly bool
	// neverSucceed never moves a group to succeeded: paid members wait for the deadline,
	// and the group fails there with them refunded.
	neverSucceed bool
}

// fakeGroups is the group-buy part of a fakeServer; it runs under the server's lock.
type fakeGroups struct {
	f      *fakeServer
	deals  map[string]*deal
	groups map[string]*group
	byKey  map[string]*seat  // user + "\x00" + Idempotency-Key
	of     map[string]*group // member order id → its group
}

func (f *fakeServer) addGroupRoutes() {
	f.gb = &fakeGroups{f: f, deals: map[string]*deal{}, groups: map[string]*group{}, byKey: map[string]*seat{}, of: map[string]*group{}}
	f.handle("POST /v1/deals", f.gb.createDeal)
	f.handle("POST /v1/groups", f.gb.open)
	f.handle("POST /v1/groups/{id}/join", f.gb.join)
	f.handle("POST /v1/groups/{id}/leave", f.gb.leave)
	f.handle("GET /v1/groups/{id}", f.gb.get)
	f.handle("POST /v1/orders/{id}/events", f.gb.event)
}

func (gb *fakeGroups) createDeal(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req dealRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	if req.MinMembers < 2 || req.MaxMembers < req.MinMembers || req.GroupPrice < 1 || req.GroupTimeLimitSeconds < 1 ||
		req.MemberPaymentTimeoutSeconds > req.GroupTimeLimitSeconds {
		writeProblem(w, http.StatusUnprocessableEntity, orderly.EINVALID, "bad deal")
		return
	}
	d := &deal{ID: gb.f.id("deal"), SKU: req.SKU, GroupPrice: req.GroupPrice, Currency: req.Currency, MinMembers: req.MinMembers,
		MaxMembers: req.MaxMembers, GroupTimeLimitSeconds: req.GroupTimeLimitSeconds,
		MemberPaymentTimeoutSeconds: cmpOr(req.MemberPaymentTimeoutSeconds, req.GroupTimeLimitSeconds), CreatedAt: now}
	gb.deals[d.ID] = d
	writeJSON(w, http.StatusCreated, d)
}

// seated reports whether the member holds a seat: not left, order not closed.
func (gb *fakeGroups) seated(m groupMember) bool {
	return m.LeftAt == nil && gb.f.orders[m.OrderID].State != orderly.StateClosed
}

// view returns the group as GET shows it.
func (gb *fakeGroups) view(g *group) *group {
	v := *g
	v.Members = nil
	v.PaidMembers, v.SeatsTaken = 0, 0
	for _, m := range g.Members {
		o := gb.f.orders[m.OrderID]
		m.OrderState, m.PayStatus = o.State, o.PayStatus
		if gb.seated(m) {
			v.SeatsTaken++
		}
		if o.State == orderly.StatePaid || o.State == stateGroupSucceeded {
			v.PaidMembers++
		}
		v.Members = append(v.Members, m)
	}
	return &v
}

// seat creates a member order for the user in g, or answers a problem; nil then.
func (gb *fakeGroups) seat(w http.ResponseWriter, g *group, user string, now time.Time) *seat {
	d := gb.deals[g.DealID]
	s := gb.f.stock[d.SKU]
	if s == nil || s.Available < 1 {
		writeProblem(w, http.StatusConflict, orderly.EOUTOFSTOCK, "not enough "+d.SKU)
		return nil
	}
	expires := now.Add(time.Duration(d.MemberPaymentTimeoutSeconds) * time.Second)
	if expires.After(g.DeadlineAt) {
		expires = g.DeadlineAt
	}
	o := &orderly.Order{ID: gb.f.id("ord"), UserID: user, Flow: flowGroupBuy, State: orderly.StatePendingPayment,
		PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: d.SKU, Quantity: 1, UnitPrice: d.GroupPrice}},
		Amount: d.GroupPrice, Currency: d.Currency, CreatedAt: now, ExpiresAt: expires, CloseAt: expires.Add(gb.f.opts.grace), Version: 1}
	s.Available--
	s.Held++
	gb.f.reserved[o.ID] = true
	gb.f.orders[o.ID] = o
	gb.of[o.ID] = g
	g.Members = append(g.Members, groupMember{UserID: user, OrderID: o.ID, JoinedAt: now})
	return &seat{Group: gb.view(g), Order: o}
}

func (gb *fakeGroups) replay(w http.ResponseWriter, r *http.Request, user string) (key string, done bool) {
	key = user + "\x00" + r.Header.Get("Idempotency-Key")
	if s := gb.byKey[key]; s != nil {
		writeJSON(w, http.StatusOK, &seat{Group: gb.view(gb.groups[s.Group.ID]), Order: gb.f.orders[s.Order.ID]})
		return key, true
	}
	return key, false
}

func (gb *fakeGroups) open(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req seatRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	key, done := gb.replay(w, r, req.UserID)
	if done {
		return
	}
	d := gb.deals[req.DealID]
	if d == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such deal")
		return
	}
	g := &group{ID: gb.f.id("grp"), DealID: d.ID, State: groupForming, LeaderUserID: req.UserID, MinMembers: d.MinMembers,
		MaxMembers: d.MaxMembers, CreatedAt: now, DeadlineAt: now.Add(time.Duration(d.GroupTimeLimitSeconds) * time.Second)}
	if s := gb.seat(w, g, req.UserID, now); s != nil {
		gb.groups[g.ID] = g
		gb.byKey[key] = s
		writeJSON(w, http.StatusCreated, s)
	}
}

func (gb *fakeGroups) join(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req seatRequest
	if !decodeStrict(w, r, &req) {
		return
	}
	key, done := gb.replay(w, r, req.UserID)
	if done {
		return
	}
	g := gb.groups[r.PathValue("id")]
	if g == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such group")
		return
	}
	seats := 0
	for _, m := range g.Members {
		if !gb.seated(m) {
			continue
		}
		seats++
		if m.UserID == req.UserID {
			writeProblem(w, http.StatusConflict, codeAlreadyMember, "already a member")
			return
		}
	}
	faults := gb.f.opts.groups
	switch {
	case g.State != groupForming || (faults.refuseForming && len(g.Members) == 1):
		writeProblem(w, http.StatusConflict, codeGroupNotForming, "group "+g.State)
	case !now.Before(g.DeadlineAt):
		writeProblem(w, http.StatusConflict, codeGroupExpired, "deadline passed")
	case seats >= g.MaxMembers || (faults.fullEarly && seats >= g.MaxMembers-1):
		writeProblem(w, http.StatusConflict, codeGroupFull, "full")
	default:
		if s := gb.seat(w, g, req.UserID, now); s != nil {
			gb.byKey[key] = s
			writeJSON(w, http.StatusCreated, s)
		}
	}
}

// refund gives a paid member's money back and its unit back to stock.
func (gb *fakeGroups) refund(o *orderly.Order, now time.Time) {
	for _, p := range gb.f.byOrder[o.ID] {
		if p.State == orderly.PaymentSucceeded {
			p.State, p.RefundedAt = orderly.PaymentRefunded, &now
		}
	}
	for _, it := range o.Items {
		s := gb.f.stock[it.SKU]
		s.Sold -= it.Quantity
		s.Available += it.Quantity
	}
	o.State, o.PayStatus = orderly.StateRefunded, orderly.PayRefunded
	o.Version++
}

func (gb *fakeGroups) leave(w http.ResponseWriter, r *http.Request, now time.Time) {
	var req struct {
		UserID string `json:"user_id"`
	}
	if !decodeStrict(w, r, &req) {
		return
	}
	g := gb.groups[r.PathValue("id")]
	if g == nil {
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such group")
		return
	}
	for i, m := range g.Members {
		if m.UserID != req.UserID || !gb.seated(m) {
			continue
		}
		if g.State != groupForming {
			writeProblem(w, http.StatusConflict, codeGroupNotForming, "group "+g.State)
			return
		}
		o := gb.f.orders[m.OrderID]
		switch o.State {
		case orderly.StatePendingPayment:
			gb.f.closeOrder(o, orderly.CloseReasonBuyerCancelled, now)
		case orderly.StatePaid:
			gb.refund(o, now)
		}
		g.Members[i].LeftAt = &now
		if !slices.ContainsFunc(g.Members, gb.seated) {
			g.State, g.FailedAt = groupFailed, &now // the leave freed the last seat: the group ends
		}
		writeJSON(w, http.StatusOK, gb.view(g))
		return
	}
	writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "not a member")
}

func (gb *fakeGroups) get(w http.ResponseWriter, r *http.Request, _ time.Time) {
	if g := gb.groups[r.PathValue("id")]; g != nil {
		writeJSON(w, http.StatusOK, gb.view(g))
		return
	}
	writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such group")
}

func (gb *fakeGroups) event(w http.ResponseWriter, r *http.Request, _ time.Time) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Event orderly.Event `json:"event"`
	}
	if !decodeStrict(w, r, &req) {
		return
	}
	o := gb.f.orders[r.PathValue("id")]
	switch {
	case o == nil:
		writeProblem(w, http.StatusNotFound, orderly.ENOTFOUND, "no such order")
	case req.Event == orderly.EventShip && (o.State == stateGroupSucceeded || gb.f.opts.groups.shipAnywhere):
		o.State = orderly.StateShipped
		o.Version++
		writeJSON(w, http.StatusOK, o)
	default:
		writeProblem(w, http.StatusConflict, orderly.EILLEGAL, "no such transition")
	}
}

// paid is called when a member order was just paid: the group succeeds when the paid
// count reaches min_members before the deadline; a member of a succeeded group moves on.
func (gb *fakeGroups) paid(o *orderly.Order, now time.Time) {
	g := gb.of[o.ID]
	if g == nil {
		return
	}
	switch {
	case g.State == groupSucceeded:
		o.State = stateGroupSucceeded
	case g.State == groupForming && now.Before(g.DeadlineAt):
		var paid []*orderly.Order
		for _, m := range g.Members {
			if mo := gb.f.orders[m.OrderID]; m.LeftAt == nil && mo.State == orderly.StatePaid {
				paid = append(paid, mo)
			}
		}
		if len(paid) < g.MinMembers || gb.f.opts.groups.neverSucceed {
			return
		}
		g.State, g.SucceededAt = groupSucceeded, &now
		for _, mo := range paid {
			mo.State = stateGroupSucceeded
		}
		if gb.f.opts.groups.refundSucceeded {
			gb.refund(paid[0], now)
		}
	}
}

// due fails every forming group whose deadline passed: unpaid members closed, paid ones
// refunded.
func (gb *fakeGroups) due(now time.Time) {
	for _, g := range gb.groups {
		if g.State != groupForming || now.Before(g.DeadlineAt.Add(-gb.f.opts.groups.failEarly)) {
			continue
		}
		g.State, g.FailedAt = groupFailed, &now
		for _, m := range g.Members {
			switch o := gb.f.orders[m.OrderID]; o.State {
			case orderly.StatePendingPayment:
				if p := gb.f.payments[o.CurrentPaymentID]; p != nil && p.State == orderly.PaymentInitiated {
					p.State, p.FailReason = orderly.PaymentFailed, "cancelled at group failure"
				}
				gb.f.closeOrder(o, closeReasonGroupFailed, now)
			case orderly.StatePaid:
				gb.refund(o, now)
			}
		}
	}
}
