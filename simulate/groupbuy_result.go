package simulate

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// GroupResult is what the group_buy flow did and found, the "groups" member of the result
// JSON:
//
//	{"deals":N,"groups":N,"succeeded":N,"failed":N,"forming":N,"members":N,"paid_members":N,
//	 "refunds":N,"left":N,"early_failures":N,"shipped":N,
//	 "planned":{"fill":N,"race":N,"deadline":N,"spoiled":N,"under":N},
//	 "lateness_ms":{"p50":x,"p90":x,"p99":x,"max":x},
//	 "joins":{"sent":N,"created":N,"refused":{"group-full":N,…},"errors":N},
//	 "deadline_payments":{"window_ms":x,"before":N,"after":N}}
type GroupResult struct {
	// Deals and Groups count those created; Succeeded, Failed and Forming how the groups
	// ended (forming at rest is a violation).
	Deals     int `json:"deals"`
	Groups    int `json:"groups"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Forming   int `json:"forming"`
	// Planned counts the groups opened by what the plan made of them: fill and race are
	// planned to succeed (min_members members pay in time), deadline is decided by a
	// payment landing at the deadline ± a few ms, spoiled (a member who does not pay in
	// time) and under (fewer than min_members) are planned to fail.
	Planned map[string]int `json:"planned"`
	// Members counts member orders created (leaders included); PaidMembers those whose
	// payment was kept (their group succeeded).
	Members     int `json:"members"`
	PaidMembers int `json:"paid_members"`
	// Refunds counts member payments that ended refunded (a failed group's paid members,
	// paid members who left, late payments).
	Refunds int `json:"refunds"`
	// Left counts members who left their forming group (POST /v1/groups/{id}/leave).
	Left int `json:"left"`
	// Shipped counts member orders of succeeded groups the merchant shipped.
	Shipped int `json:"shipped"`
	// EarlyFailures counts groups failed before their deadline (failed_at < deadline_at).
	EarlyFailures int `json:"early_failures"`
	// Lateness is failed_at − deadline_at over the failed groups.
	Lateness Percentiles `json:"lateness_ms"`
	// Joins counts the member-order requests: group opens and joins.
	Joins JoinCounts `json:"joins"`
	// DeadlinePayments counts the success callbacks sent within DeadlineWindowMS of their
	// group's deadline, before and after it.
	DeadlinePayments DeadlinePayments `json:"deadline_payments"`
}

// JoinCounts counts the requests for a seat: POST /v1/groups (the leader's) and
// POST /v1/groups/{id}/join. Sent = Created + Σ Refused + Errors.
type JoinCounts struct {
	Sent    int            `json:"sent"`
	Created int            `json:"created"`
	Refused map[string]int `json:"refused"`
	Errors  int            `json:"errors"`
	// LatencyMS is the time from asking for a seat to its answer (created or refused), in
	// ms: the wait for one of Config.Concurrency request slots, retries and the server.
	LatencyMS Percentiles `json:"latency_ms"`
}

// DeadlinePayments counts the success callbacks aimed at a group's deadline.
type DeadlinePayments struct {
	WindowMS float64 `json:"window_ms"`
	Before   int     `json:"before"`
	After    int     `json:"after"`
}

// summary returns the lines Result.Summary prints for the groups.
func (g *GroupResult) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  groups      %d deals, %d groups: %d succeeded, %d failed, %d still forming; %d early failures; planned %d to succeed, %d at the deadline, %d to fail\n",
		g.Deals, g.Groups, g.Succeeded, g.Failed, g.Forming, g.EarlyFailures,
		g.Planned[fateFill.String()]+g.Planned[fateRace.String()], g.Planned[fateDeadline.String()],
		g.Planned[fateSpoiled.String()]+g.Planned[fateUnder.String()])
	fmt.Fprintf(&b, "  members     %d member orders, %d paid and kept, %d payments refunded, %d left, %d shipped\n",
		g.Members, g.PaidMembers, g.Refunds, g.Left, g.Shipped)
	refused := make([]string, 0, len(g.Joins.Refused))
	for _, code := range sortedCodes(g.Joins.Refused) {
		refused = append(refused, fmt.Sprintf("%d %s", g.Joins.Refused[code], code))
	}
	fmt.Fprintf(&b, "  seats       %d asked, %d taken, refused: %s; %d errors; answered in p50 %s, p99 %s, max %s\n",
		g.Joins.Sent, g.Joins.Created, strings.Join(refused, ", "), g.Joins.Errors,
		ms(g.Joins.LatencyMS.P50), ms(g.Joins.LatencyMS.P99), ms(g.Joins.LatencyMS.Max))
	fmt.Fprintf(&b, "  group late  p50 %s, p90 %s, p99 %s, max %s (failed_at − deadline_at); %d payments within %s of a group deadline (%d before, %d after)\n",
		ms(g.Lateness.P50), ms(g.Lateness.P90), ms(g.Lateness.P99), ms(g.Lateness.Max),
		g.DeadlinePayments.Before+g.DeadlinePayments.After, ms(g.DeadlinePayments.WindowMS), g.DeadlinePayments.Before, g.DeadlinePayments.After)
	return b.String()
}

// sortedCodes returns the problem codes of counts, sorted.
func sortedCodes(counts map[string]int) []string { return slices.Sorted(maps.Keys(counts)) }
