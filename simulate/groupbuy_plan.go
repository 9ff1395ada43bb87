package simulate

import (
	"fmt"
	"math/rand/v2"
	"slices"
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

// fate is what a group is planned to come to: most groups fill and pay in time, a
// minority are planned to fail (too few members, a member who does not pay in time), and
// one kind is decided by a payment landing at the deadline ± deadlineJitter.
type fate int

const (
	fateFill     fate = iota // min..max members, min of them keepers (pay in time): succeeds
	fateRace                 // max+1 members, the last two race for the last seat; min keepers: succeeds
	fateDeadline             // min members: min−1 keepers, the last payment lands at the deadline ± deadlineJitter
	fateSpoiled              // min members: min−1 keepers and one who pays late, never, leaves or cancels: fails
	fateUnder                // fewer than min_members members of any behaviour: fails
	numFates
)

var fateNames = [numFates]string{"fill", "race", "deadline", "spoiled", "under"}

func (f fate) String() string { return fateNames[f] }

// fateWeights is the mix of groups, in percent: 70 % planned to succeed, 10 % decided at
// the deadline (about half succeed), 20 % planned to fail.
var fateWeights = [numFates]int{50, 20, 10, 10, 10}

// spoilers are the behaviours of the member who makes a spoiled group fail: a member who
// pays then leaves is not one (when the others paid first, that payment succeeds the group).
var spoilers = []member{memberPayLate, memberNeverPay, memberLeave, memberCancel}

// keeperTwiceShare of keepers pay twice (the success callback 3× in parallel, then once more).
const keeperTwiceShare = 0.2

// Shape of the group-buy traffic.
const (
	groupsPerDeal   = 25
	seatsPerGroup   = 3 // about, for the number of deals
	groupStockExtra = 10
	// deadlineJitter is how far from the group deadline a deadline payer's callback lands.
	deadlineJitter = 30 * time.Millisecond
	// twiceCount success callbacks are sent in parallel by a member who pays twice.
	twiceCount      = 3
	lateJoinShare   = 0.10 // groups (not racing) that get one more join just after their deadline
	lateJoinLatest  = 50 * time.Millisecond
	shortTimeoutPct = 30 // % of deals whose member payment timeout is shorter than the group time limit
	// Joins are sent within [joinEarliest, joinLatest) × the group time limit after the
	// group opened; a race's two joins at raceGap after the group's latest other join.
	joinEarliest, joinLatest = 0.05, 0.40
	raceGap                  = 10 * time.Millisecond
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
	fate    fate
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
	// keeper: one of the min_members members a succeeding group is planned on (pays on
	// time or twice, never leaves).
	keeper bool
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
	// fates counts the groups by fate.
	fates [numFates]int
}

// newGroupPlan draws about seats seat requests (group opens and joins) in groups of
// random sizes and fates (fateWeights). limit is the shortest group time limit
// (Config.GroupTimeLimit, whole seconds, at least 2).
//
// A group planned to succeed has min_members keepers who join in the first 40 % of the
// time limit and pay within 20 % of it after taking their seat, so that on a server that
// answers within a few hundred ms the group fills and pays well before its deadline; its
// other members behave as drawn from memberWeights (paying, late, never, leaving,
// cancelling). In a racing group the last two joins are sent at the same moment after all
// the others, and the keepers pay only after it, so that the race is for the last seat of
// a group still forming.
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
		g := &plannedGroup{index: len(p.groups), deal: d, fate: drawFate(rng)}
		p.fates[g.fate]++
		p.members += planGroup(rng, g, prefix, p.members, seats-p.members)
		d.demand += int64(len(g.members))
		p.groups = append(p.groups, g)
	}
	for _, d := range p.deals {
		d.stock = d.demand + groupStockExtra
	}
	return p
}

// planGroup draws group g's members (at most room; their users numbered after the first
// taken seat requests of the plan) by its fate, and returns how many it drew.
func planGroup(rng *rand.Rand, g *plannedGroup, prefix string, taken, room int) int {
	d := g.deal
	n, keepers := d.min+rng.IntN(d.max-d.min+1), d.min
	switch g.fate {
	case fateRace:
		n, g.oversubscribed = d.max+1, true
	case fateDeadline, fateSpoiled:
		n, keepers = d.min, d.min-1
	case fateUnder:
		n, keepers = 1+rng.IntN(d.min-1), 0
	}
	n = min(n, room)
	newMember := func(i int) *plannedMember {
		return &plannedMember{group: g, index: i, behaviour: drawMember(rng),
			user:           fmt.Sprintf("%s-gb-user-%05d", prefix, taken+i+1),
			payDelay:       time.Duration((0.02 + 0.08*rng.Float64()) * float64(d.limit)),
			callbackDelay:  time.Duration((0.02 + 0.08*rng.Float64()) * float64(d.limit)),
			deadlineOffset: time.Duration(rng.Int64N(int64(2*deadlineJitter)+1)) - deadlineJitter}
	}
	for i := range n {
		m := newMember(i)
		if i > 0 {
			m.joinAt = time.Duration((joinEarliest + (joinLatest-joinEarliest)*rng.Float64()) * float64(d.limit))
		}
		g.members = append(g.members, m)
	}
	// The keepers, at random; in a racing group not the two racers, one of whom loses,
	// unless the others are too few to be min_members (max = min): then every member.
	candidates := rng.Perm(n)
	if race := g.oversubscribed && n >= 3; race && n-2 < keepers {
		keepers = n
	} else if race {
		candidates = slices.DeleteFunc(candidates, func(i int) bool { return i >= n-2 })
	}
	for _, i := range candidates[:min(keepers, len(candidates))] {
		m := g.members[i]
		m.keeper, m.behaviour = true, memberPayOnTime
		if rng.Float64() < keeperTwiceShare {
			m.behaviour = memberPayTwice
		}
	}
	if g.fate == fateDeadline || g.fate == fateSpoiled {
		// The one member who is not a keeper decides the group.
		for _, m := range g.members {
			switch {
			case m.keeper:
			case g.fate == fateDeadline:
				m.behaviour = memberPayAtDeadline
			default:
				m.behaviour = spoilers[rng.IntN(len(spoilers))]
			}
		}
	}
	if g.oversubscribed && n >= 3 {
		// The last two joins race for the last seat: sent at the same moment, after every
		// other join; the keepers who joined before pay only after it.
		var last time.Duration
		for _, m := range g.members[:n-2] {
			last = max(last, m.joinAt)
		}
		raceAt := last + raceGap
		g.members[n-1].joinAt, g.members[n-2].joinAt = raceAt, raceAt
		for _, m := range g.members[:n-2] {
			if m.keeper {
				m.payDelay += raceAt - m.joinAt
			}
		}
	} else if n >= 1 && n < room && rng.Float64() < lateJoinShare {
		// One more member asks for a seat just after the deadline: refused.
		m := newMember(n)
		m.lateJoin, m.joinAt = true, d.limit+time.Duration(5+rng.IntN(int(lateJoinLatest/time.Millisecond)))*time.Millisecond
		g.members = append(g.members, m)
	}
	return len(g.members)
}

func drawFate(rng *rand.Rand) fate { return drawWeighted(rng, fateWeights[:], fateFill) }

func drawMember(rng *rand.Rand) member { return drawWeighted(rng, memberWeights[:], memberNeverPay) }
