package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testenv"
)

func TestGroupPlan(t *testing.T) {
	t.Parallel()
	a, b := newGroupPlan(5, "p", 3000, 3*time.Second), newGroupPlan(5, "p", 3000, 3*time.Second)
	if a.members != 3000 || len(a.groups) != len(b.groups) {
		t.Fatalf("%d seats in %d groups (again: %d groups), want 3000", a.members, len(a.groups), len(b.groups))
	}
	counts := map[member]int{}
	fates := map[fate]int{}
	over, under, late := 0, 0, 0
	for i, g := range a.groups {
		d := g.deal
		if d.min < 2 || d.min > 4 || d.max < d.min || d.max > d.min+2 || d.limit < 3*time.Second || d.limit > 5*time.Second ||
			d.memberTimeout > d.limit || d.memberTimeout < d.limit-time.Second {
			t.Errorf("group %d: deal min %d max %d limit %s member timeout %s", i, d.min, d.max, d.limit, d.memberTimeout)
		}
		if len(g.members) != len(b.groups[i].members) || g.members[0].behaviour != b.groups[i].members[0].behaviour || g.fate != b.groups[i].fate {
			t.Errorf("group %d differs between two plans of one seed", i)
		}
		fates[g.fate]++
		n := len(g.members)
		if g.oversubscribed {
			over++
			if i < len(a.groups)-1 && (n != d.max+1 || g.members[n-1].joinAt != g.members[n-2].joinAt) {
				t.Errorf("group %d: oversubscribed with %d members for max %d; the last two should race", i, n, d.max)
			}
		}
		var seated, keepers, deciders int // seated: members not refused by plan (late join, race loser)
		var raceAt time.Duration
		if g.oversubscribed {
			raceAt = g.members[n-1].joinAt
		}
		for j, m := range g.members {
			counts[m.behaviour]++
			if m.lateJoin {
				late++
				if m.joinAt <= d.limit || m.joinAt > d.limit+lateJoinLatest+5*time.Millisecond || m.keeper {
					t.Errorf("group %d: late join at %s for a limit of %s (keeper %v)", i, m.joinAt, d.limit, m.keeper)
				}
				continue
			}
			if m.joinAt >= d.limit/2 {
				t.Errorf("group %d: join at %s, want in the first half of %s", i, m.joinAt, d.limit)
			}
			if m.keeper {
				if m.behaviour != memberPayOnTime && m.behaviour != memberPayTwice {
					t.Errorf("group %d: keeper %d plays %s", i, j, m.behaviour)
				}
				// A keeper pays in time: by 70 % of the limit if served at once, and in a
				// racing group only after the race.
				if pay := m.joinAt + m.payDelay + m.callbackDelay; pay > d.limit*7/10+raceAt || (g.oversubscribed && j < n-2 && m.joinAt+m.payDelay < raceAt) {
					t.Errorf("group %d: keeper %d joins at %s and pays at %s (race at %s), limit %s", i, j, m.joinAt, pay, raceAt, d.limit)
				}
				if !g.oversubscribed || j < n-2 {
					keepers++
				}
			}
			if m.behaviour == memberPayAtDeadline || slices.Contains(spoilers, m.behaviour) {
				deciders++
			}
			if m.deadlineOffset.Abs() > deadlineJitter {
				t.Errorf("deadline offset %s beyond %s", m.deadlineOffset, deadlineJitter)
			}
			seated++
		}
		if g.oversubscribed {
			seated-- // one of the racers loses
			if keepers < d.min && i < len(a.groups)-1 {
				keepers = d.min // max = min: every member keeps, the race's winner is the min-th
			}
		}
		if i == len(a.groups)-1 {
			continue // cut short by the number of seats
		}
		switch g.fate {
		case fateFill, fateRace:
			if keepers < d.min || seated > d.max {
				t.Errorf("group %d (%s): %d keepers holding a seat, %d seated, want ≥ min %d, ≤ max %d", i, g.fate, keepers, seated, d.min, d.max)
			}
		case fateDeadline, fateSpoiled:
			if seated != d.min || keepers != d.min-1 || deciders < 1 {
				t.Errorf("group %d (%s): %d seated, %d keepers, %d deciders; want %d, %d, 1", i, g.fate, seated, keepers, deciders, d.min, d.min-1)
			}
		case fateUnder:
			if seated >= d.min || keepers != 0 {
				t.Errorf("group %d (under): %d seated, %d keepers; want fewer than min %d and none", i, seated, keepers, d.min)
			}
			under++
		}
	}
	if over == 0 || under == 0 || late == 0 {
		t.Errorf("%d oversubscribed, %d undersubscribed groups, %d late joins: want some of each", over, under, late)
	}
	for m := range numMembers {
		if counts[m] == 0 {
			t.Errorf("no member plays %s", m)
		}
	}
	// Most groups are planned to fill and pay, a minority to fail.
	if ok := fates[fateFill] + fates[fateRace]; ok*100 < 60*len(a.groups) || fates[fateSpoiled] == 0 || fates[fateDeadline] == 0 || a.fates != [numFates]int{fates[0], fates[1], fates[2], fates[3], fates[4]} {
		t.Errorf("fates %v (plan counts %v) of %d groups: want ≥ 60 %% fill or race, some of every fate", fates, a.fates, len(a.groups))
	}
}

func TestParseFlows(t *testing.T) {
	t.Parallel()
	for name, want := range map[string][]string{"standard": {"standard"}, "group_buy": {"group_buy"}, "wallet": {"wallet"}, "ride_hailing": {"ride_hailing"}, "mixed": {"group_buy", "standard", "wallet"}} {
		if got, err := ParseFlows(name); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseFlows(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseFlows("taxi"); err == nil || !strings.Contains(err.Error(), `unknown flow "taxi"`) {
		t.Errorf("ParseFlows(taxi): %v", err)
	}
	if _, err := (Config{Target: "http://x", Flows: []string{"taxi"}}).withDefaults(); err == nil {
		t.Error("an unknown flow in Config.Flows was accepted")
	}
}

// runGroupFake runs a small group-buy simulation against a fake server with the faults given.
func runGroupFake(t *testing.T, faults groupFaults, flows ...string) *Result {
	t.Helper()
	res, _ := runFake(t, fakeOptions{grace: 100 * time.Millisecond, groups: &faults}, Config{Orders: 90, Rate: 60, Seed: 3,
		Flows: flows, GroupTimeLimit: 2 * time.Second, PaymentTimeout: 2 * time.Second, MaxLateness: 2 * time.Second})
	t.Logf("\n%s", res.Summary())
	return res
}

func TestGroupBuyAgainstFake(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	for _, flows := range [][]string{{flowGroupBuy}, {flowGroupBuy, orderly.FlowStandard}} {
		t.Run(strings.Join(flows, "+"), func(t *testing.T) {
			t.Parallel()
			res := runGroupFake(t, groupFaults{}, flows...)
			if !res.OK() {
				t.Fatalf("violations against a correct server:\n%s", strings.Join(res.Violations, "\n"))
			}
			g := res.Groups
			if g == nil || g.Succeeded == 0 || g.Failed == 0 || g.Forming != 0 || g.Refunds == 0 || g.Shipped == 0 || g.Left == 0 {
				t.Fatalf("groups %+v: want some succeeded, failed, refunded, shipped, left; none forming", g)
			}
			// Against a correct server that answers at once, the groups end as planned:
			// those planned to fail fail, and about all those planned to succeed succeed.
			toSucceed := g.Planned[fateFill.String()] + g.Planned[fateRace.String()]
			toFail := g.Planned[fateSpoiled.String()] + g.Planned[fateUnder.String()]
			if sum(g.Planned) != g.Groups || toSucceed == 0 || toFail == 0 || g.Failed < toFail || g.Succeeded*10 < toSucceed*8 {
				t.Errorf("planned %v: %d to succeed, %d to fail; %d succeeded, %d failed", g.Planned, toSucceed, toFail, g.Succeeded, g.Failed)
			}
			if g.Groups != g.Succeeded+g.Failed || g.Joins.Sent != g.Joins.Created+g.Joins.Errors+sum(g.Joins.Refused) || g.Members != g.Joins.Created {
				t.Errorf("groups %+v do not reconcile", g)
			}
			if g.Joins.Refused[codeGroupFull] == 0 || g.Joins.Refused[codeGroupExpired]+g.Joins.Refused[codeGroupNotForming] == 0 {
				t.Errorf("refused seats %v: want group-full (races for the last seat) and expired or not-forming (late joins)", g.Joins.Refused)
			}
			if g.Lateness.Max <= 0 || g.EarlyFailures != 0 || g.Joins.LatencyMS.Max <= 0 || g.Joins.LatencyMS.P50 > g.Joins.LatencyMS.Max {
				t.Errorf("group lateness %+v, early failures %d, seat latency %+v", g.Lateness, g.EarlyFailures, g.Joins.LatencyMS)
			}
			if res.Sent != res.Created+res.Errors+sum(res.Rejected) {
				t.Errorf("sent %d != created %d + errors %d + rejected %v", res.Sent, res.Created, res.Errors, res.Rejected)
			}
		})
	}
}

// TestGroupBuyDetectsBrokenServer runs against fake servers that break a group rule each
// and checks that the run says which.
func TestGroupBuyDetectsBrokenServer(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	tests := []struct {
		name   string
		faults groupFaults
		want   []string
	}{
		{name: "refunds a member of a succeeded group", faults: groupFaults{refundSucceeded: true},
			want: []string{"G: group ", "succeeded and its member order", "is refunded"}},
		{name: "ships in a failed group", faults: groupFaults{shipAnywhere: true},
			want: []string{"of failed group", "was shipped", "but the group failed"}},
		{name: "fails groups early", faults: groupFaults{failEarly: 300 * time.Millisecond},
			want: []string{"before its deadline"}},
		{name: "refuses a join to a forming group with free seats", faults: groupFaults{refuseForming: true},
			want: []string{"was refused group-not-forming: it was answered at", "was forming until it failed at"}},
		{name: "answers group-full with a seat free", faults: groupFaults{fullEarly: true},
			want: []string{"was refused group-full: the plan asks for", "was refused group-full: at most"}},
		{name: "fails groups whose members paid in time", faults: groupFaults{neverSucceed: true},
			want: []string{"failed although the payments of", "were acknowledged before its deadline"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runGroupFake(t, tt.faults, flowGroupBuy)
			for _, w := range tt.want {
				if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.Contains(v, w) }) {
					t.Errorf("no violation contains %q; got:\n%s", w, strings.Join(res.Violations, "\n"))
				}
			}
			if tt.faults.failEarly > 0 && (res.Groups.EarlyFailures == 0 || res.EarlyCloses == 0) {
				t.Errorf("early failures %d, early closes %d: want some", res.Groups.EarlyFailures, res.EarlyCloses)
			}
		})
	}
}
