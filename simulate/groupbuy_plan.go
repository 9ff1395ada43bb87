package simulate

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// member is what a group member does with its seat.
type member int

const (
	memberPayOnTime     member = iota // pays soon after taking the seat
	memberPayTwice                    // the success callback 3× in parallel, then once more
	memberPayAtDeadline               // the success callback lands at the group deadline ± deadlineJitter
	memberPayLate                     // the success callback comes after the order closed: refunded
	memberNeverPay                    // walks away: the order closes, the seat is freed
	memberLeave                       // leaves the forming group unpaid: the order is cancelled
	memberPayThenLeave                // pays, then leaves the forming group: refunded in full
	memberCancel                      // cancels the order (POST /v1/orders/{id}/cancel)
	numMembers
)

var memberNames = [numMembers]string{"member_pay_on_time", "member_pay_twice", "member_pay_at_deadline",
	"member_pay_late", "member_never_pay", "member_leave", "member_pay_then_leave", "member_cancel"}

func (m member) String() string { return memberNames[m] }

// memberWeights is the mix of members, in percent.
var memberWeights = [numMembers]int{40, 8, 12, 6, 12, 7, 8, 7}

// Shape of the group-buy traffic.
const (
	groupsPerDeal   = 25
	seatsPerGroup   = 3 // about, for the number of deals
	groupStockExtra = 10
	// deadlineJitter is how far from the group deadline a deadline payer's callback lands.
	deadlineJitter = 30 * time.Millisecond
	// twiceCount success callbacks are sent in parallel by a member who pays twice.
	twiceCount      = 3
	oversubShare    = 0.25 // groups planned with one seat too many: the last two joins race for the last seat
	underShare      = 0.25 // groups planned with fewer members than min_members: they fail
	lateJoinShare   = 0.10 // groups that get one join just after their deadline
	lateJoinLatest  = 50 * time.Millisecond
	shortTimeoutPct = 30 // % of deals whose member payment timeout is shorter than the group time limit
)

// plannedDeal is one deal of the plan.
type plannedDeal struct {
	index         int
	sku           string
	price         int64 // minor units, the group price
	min, max      int
	limit         time.Duration // group time limit, whole seconds
	memberTimeout time.Duration // member payment timeout, whole seconds, ≤ limit
	demand        int64         // seats the plan asks for
	stock         int64
}

// plannedGroup is one group of the plan: a leader and the members who try to join.
type plannedGroup struct {
	index   int
	deal    *plannedDeal
	members []*plannedMember // members[0] is the leader
	// oversubscribed: more seats planned than max_members, so group-full is expected.
	oversubscribed bool
}

// plannedMember is one seat request of a group.
type plannedMember struct {
	group     *plannedGroup
	index     int // in the group; 0 is the leader
	user      string
	behaviour member
	// joinAt is when the join is sent, after the group was opened; lateJoin marks a join
	// planned after the group deadline (its offset past it is joinAt − limit).
	joinAt   time.Duration
	lateJoin bool
	// payDelay is the wait after taking the seat before paying or leaving; callbackDelay
	// after a payment started before its callback; deadlineOffset is where a deadline
	// payer's callback lands relative to the group deadline.
	payDelay, callbackDelay, deadlineOffset time.Duration
}

// groupPlan is the group-buy traffic of a run.
type groupPlan struct {
	deals   []*plannedDeal
	groups  []*plannedGroup
	members int // seat requests in all
}

// newGroupPlan draws about seats seat requests (group opens and joins) in groups of
// random sizes. limit is the shortest group time limit (Config.GroupTimeLimit, whole
// seconds, at least 2).
func newGroupPlan(seed int64, prefix string, seats int, limit time.Duration) *groupPlan {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6772_6f75_7062_7579)) //nolint:gosec // "groupbuy": a reproducible plan, not a secret
	limit = max(limit.Truncate(time.Second), 2*time.Second)
	p := &groupPlan{}
	newDeal := func() *plannedDeal {
		d := &plannedDeal{index: len(p.deals), sku: fmt.Sprintf("%s-deal-sku-%02d", prefix, len(p.deals)+1),
			price: 300 + 100*rng.Int64N(30), min: 2 + rng.IntN(3)}
		d.max = d.min + rng.IntN(3)
		d.limit = limit + time.Duration(rng.IntN(3))*time.Second
		d.memberTimeout = d.limit
		if rng.IntN(100) < shortTimeoutPct {
			d.memberTimeout = d.limit - time.Second
		}
		p.deals = append(p.deals, d)
		return d
	}
	// About groupsPerDeal groups a deal (of about seatsPerGroup seats), the groups dealt
	// round-robin: every deal takes seats all along the run, as the standard flow's orders
	// spread over its SKUs, rather than one deal's stock row taking all the traffic at a time.
	for range max(1, seats/(groupsPerDeal*seatsPerGroup)) {
		newDeal()
	}
	for p.members < seats {
		d := p.deals[len(p.groups)%len(p.deals)]
		g := &plannedGroup{index: len(p.groups), deal: d}
		n := d.min + rng.IntN(d.max-d.min+1)
		switch x := rng.Float64(); {
		case x < oversubShare:
			n, g.oversubscribed = d.max+1, true
		case x < oversubShare+underShare:
			n = 1 + rng.IntN(d.min-1)
		}
		n = min(n, seats-p.members)
		for i := range n {
			m := &plannedMember{group: g, index: i, behaviour: drawMember(rng),
				user:           fmt.Sprintf("%s-gb-user-%05d", prefix, p.members+i+1),
				payDelay:       time.Duration((0.02 + 0.08*rng.Float64()) * float64(d.limit)),
				callbackDelay:  time.Duration((0.02 + 0.08*rng.Float64()) * float64(d.limit)),
				deadlineOffset: time.Duration(rng.Int64N(int64(2*deadlineJitter)+1)) - deadlineJitter}
			if i > 0 {
				m.joinAt = time.Duration((0.05 + 0.45*rng.Float64()) * float64(d.limit))
			}
			g.members = append(g.members, m)
		}
		if g.oversubscribed && n >= 3 {
			// The last two joins race for the last seat: sent at the same moment.
			last := g.members[n-1]
			last.joinAt = g.members[n-2].joinAt
		}
		if n >= 2 && rng.Float64() < lateJoinShare {
			m := g.members[n-1]
			m.lateJoin, m.joinAt = true, d.limit+time.Duration(5+rng.IntN(int(lateJoinLatest/time.Millisecond)))*time.Millisecond
		}
		d.demand += int64(n)
		p.members += n
		p.groups = append(p.groups, g)
	}
	for _, d := range p.deals {
		d.stock = d.demand + groupStockExtra
	}
	return p
}

func drawMember(rng *rand.Rand) member {
	n := rng.IntN(100)
	for m, w := range memberWeights {
		if n < w {
			return member(m)
		}
		n -= w
	}
	return memberNeverPay
}
