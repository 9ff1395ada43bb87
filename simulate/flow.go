package simulate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
)

// FlowDriver drives the traffic of one flow (docs/concepts/orders-and-flows.md) in a run and checks its
// outcome. The run (Run) owns what every flow shares — the HTTP client and its targets, the
// measured clock, the gateway's ledger, the send pace, settling and the Result — and calls
// the drivers of Config.Flows through these hooks, in this order:
//
//  1. Plan, once, before anything is sent: draw the flow's share of the traffic from the
//     run's seed.
//  2. Seed: create what the traffic needs on the server (stock, coupons, deals), recording
//     the units stocked with runner.stocked.
//  3. Drive, on its own goroutine beside the other flows' drivers: send the traffic from
//     runner.sendStart at Config.Rate × the flow's share and play every actor; return when
//     all are done.
//  4. Settle, repeatedly (every settlePoll) until every driver reports rest, at most until
//     Config.Drain after the latest LastDeadline of all drivers.
//  5. Check: add the flow's counts, lateness samples (Result.addLateness) and violations to
//     the Result. The run then checks the gateway's ledger against every driver's Payments.
//
// A driver registers itself by name with RegisterFlow from its own file; adding a flow
// touches neither Run nor the other drivers. Drivers live in this package: they use its
// HTTP client.
type FlowDriver interface {
	// Plan draws the flow's traffic: orders order requests (creations, joins, …) from r's
	// seed and name prefix.
	Plan(r *runner, orders int)
	// Seed creates what the traffic needs on the server; an error ends the run.
	Seed(ctx context.Context, r *runner) error
	// Drive sends the traffic and plays its actors; it returns when they are all done or
	// ctx ended.
	Drive(ctx context.Context, r *runner)
	// LastDeadline is the latest deadline of anything the flow created (a close_at, a group
	// deadline): settling waits at most Config.Drain past it.
	LastDeadline() time.Time
	// Settle reads what has not settled yet once and reports whether all of it is at rest.
	Settle(ctx context.Context, r *runner) bool
	// Check adds the flow's counts and violations to res.
	Check(r *runner, res *Result)
	// Payments returns every payment of the flow's orders as read at rest, and the ids of
	// the merchant refunds of those orders (their gateway calls carry the refund id as
	// idempotency key): the run checks the gateway's ledger against them.
	Payments() (payments []FinalPayment, refundIDs []string)
	// Progress returns the flow's figures for the progress line, e.g. "sent 10/80 created 9".
	Progress() string
}

// FinalPayment is a payment of a flow's order as read at rest, for the ledger check.
type FinalPayment struct {
	OrderID string
	// Who names the actor in violations, e.g. the buyer's behaviour.
	Who     string
	Payment *orderly.Payment
}

// Flow names of Config.Flows besides those of registered drivers.
const (
	// FlowMixed, given to ParseFlows, means every registered flow at once.
	FlowMixed = "mixed"
)

var (
	flowsMu sync.Mutex
	flows   = map[string]func() FlowDriver{}
	// notMixed are registered flows that FlowMixed leaves out (excludeFromMixed).
	notMixed = map[string]bool{}
)

// excludeFromMixed leaves a registered flow out of FlowMixed: it runs only when named.
// ride_hailing is: the mixed runs (standard and group_buy) keep their figures comparable
// with earlier ones; it runs on several instances too when named (its card holds are in
// the database).
func excludeFromMixed(name string) {
	flowsMu.Lock()
	defer flowsMu.Unlock()
	notMixed[name] = true
}

// RegisterFlow makes a flow driver available by name to Config.Flows and `orderly simulate
// --flow`. It panics when the name is taken: drivers register from init functions.
func RegisterFlow(name string, newDriver func() FlowDriver) {
	flowsMu.Lock()
	defer flowsMu.Unlock()
	if _, dup := flows[name]; dup || name == FlowMixed {
		panic("simulate: flow driver " + name + " registered twice")
	}
	flows[name] = newDriver
}

// FlowNames returns the names of the registered flow drivers, sorted.
func FlowNames() []string {
	flowsMu.Lock()
	defer flowsMu.Unlock()
	return slices.Sorted(maps.Keys(flows))
}

// ParseFlows turns a --flow value into Config.Flows: a registered flow's name, or
// FlowMixed for every registered flow at once (but those excluded from it, see
// excludeFromMixed). An unknown name is an error listing the known ones.
func ParseFlows(name string) ([]string, error) {
	if name == FlowMixed {
		flowsMu.Lock()
		defer flowsMu.Unlock()
		var out []string
		for _, n := range slices.Sorted(maps.Keys(flows)) {
			if !notMixed[n] {
				out = append(out, n)
			}
		}
		return out, nil
	}
	if slices.Contains(FlowNames(), name) {
		return []string{name}, nil
	}
	return nil, fmt.Errorf("unknown flow %q: want one of %v or %s", name, FlowNames(), FlowMixed)
}

// newDriver returns a new driver of the named flow, nil for an unknown name.
func newDriver(name string) FlowDriver {
	flowsMu.Lock()
	defer flowsMu.Unlock()
	if f := flows[name]; f != nil {
		return f()
	}
	return nil
}

// shareOf splits orders between n flows: the i-th gets orders/n, the first ones one more
// while a remainder is left.
func shareOf(orders, n, i int) int {
	s := orders / n
	if i < orders%n {
		s++
	}
	return s
}
