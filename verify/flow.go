package verify

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// FlowChecks is the set of checks one flow adds to those every order gets (Check's
// I1–I7). Check makes one per run for each registered flow (RegisterFlowChecks), loads it
// inside its read transaction, gives it every order of its flow with the order's payments
// and refunds, and finishes it after the order scan; violations go through the given
// Violations.
type FlowChecks interface {
	// Load reads the flow's own rows (groups, …) in the check's read transaction.
	Load(ctx context.Context, tx store.Tx, opts *Options) error
	// Order checks one order of the flow.
	Order(v *Violations, o *orderly.Order, payments []*orderly.Payment, refunds []*orderly.Refund)
	// Finish checks what spans several orders (a group and its members).
	Finish(v *Violations)
}

// Violations collects the violations of one Check (capped by Options.MaxViolations).
type Violations struct{ c *checker }

// Add records one violation of invariant inv ("I2", "G", …).
func (v *Violations) Add(inv, format string, args ...any) { v.c.violate(inv, format, args...) }

// EarlyClose counts one early close (or early failure) in Report.EarlyCloses; record the
// violation with Add.
func (v *Violations) EarlyClose() { v.c.rep.EarlyCloses++ }

// Now is the database clock at the start of the check.
func (v *Violations) Now() time.Time { return v.c.now }

var (
	flowChecksMu sync.Mutex
	flowChecks   = map[string]func() FlowChecks{}
)

// RegisterFlowChecks registers the checks of a flow by its name. It panics when the flow
// has checks already: flows register from init functions.
func RegisterFlowChecks(flow string, newChecks func() FlowChecks) {
	flowChecksMu.Lock()
	defer flowChecksMu.Unlock()
	if _, dup := flowChecks[flow]; dup {
		panic("verify: checks of flow " + flow + " registered twice")
	}
	flowChecks[flow] = newChecks
}

// newFlowChecks returns a new set of checks of every registered flow, by flow name.
func newFlowChecks() map[string]FlowChecks {
	flowChecksMu.Lock()
	defer flowChecksMu.Unlock()
	out := map[string]FlowChecks{}
	for _, name := range slices.Sorted(maps.Keys(flowChecks)) {
		out[name] = flowChecks[name]()
	}
	return out
}
