package simulate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly/verify"
)

// Result is what a run did and found. Its JSON shape is stable:
//
//	{"orders":N,"paid":N,"closed":N,"cancelled":N,"refunded":N,"late_payments":N,
//	 "duplicate_callbacks":N,"early_closes":N,"violations":[],
//	 "lateness_ms":{"p50":x,"p90":x,"p99":x,"max":x},"duration_s":x,"orders_per_s":x,
//	 "clock":{"source":"database","offset_ms":x,"uncertainty_ms":x,"margin_ms":x},
//	 "near_deadline":{"window_ms":1000,"successes":N,"before_close_at":N,"paid":N,"closed":N},
//	 "sent":N,"created":N,"rejected":{"coupon-unavailable":N,"out-of-stock":N},"errors":N,
//	 "send_s":x,"missed_deadline":N,"queue_wait_ms":{"p50":x,"p90":x,"p99":x,"max":x},
//	 "paid_share":x,"planned_paid_share":x,"payers":N,"payers_paid":N}
//
// The order requests reconcile: sent = created + Σ rejected + errors.
//
// The fields tagged json:"-" are details for Summary and for callers in Go.
type Result struct {
	// Gateway is the payment provider the run paid through: "sim" (signed orderly callbacks),
	// or "stripe", "alipay", "wechat" (an imitation of that provider, driven through the
	// buyer's handoff and the provider's signed notifications); "" against a --target.
	Gateway string `json:"gateway,omitempty"`
	// Orders is the number of orders the server created (201). Rejected ones are not
	// counted; at rest Paid + Closed + Cancelled = Orders.
	Orders int `json:"orders"`
	// Paid counts orders that ended paid (or shipped, completed).
	Paid int `json:"paid"`
	// Closed counts orders closed for payment_timeout.
	Closed int `json:"closed"`
	// Cancelled counts orders closed for buyer_cancelled.
	Cancelled int `json:"cancelled"`
	// Refunded counts payments that ended refunded.
	Refunded int `json:"refunded"`
	// LatePayments counts success callbacks sent after their order closed.
	LatePayments int `json:"late_payments"`
	// DuplicateCallbacks counts callbacks sent again after a first identical one.
	DuplicateCallbacks int `json:"duplicate_callbacks"`
	// EarlyCloses counts orders closed for payment_timeout before close_at (I1).
	EarlyCloses int `json:"early_closes"`
	// Violations are human-readable, each prefixed with its invariant ("I2: …") or "HTTP"
	// for a contract breach. Never nil, so it encodes as [].
	Violations []string `json:"violations"`
	// Lateness is closed_at − close_at over the orders closed for payment_timeout.
	Lateness Percentiles `json:"lateness_ms"`
	// DurationS is the run's wall time in seconds, seeding and settling included.
	DurationS float64 `json:"duration_s"`
	// OrdersPerS is the created orders per second of the send window: Created / SendS.
	OrdersPerS float64 `json:"orders_per_s"`
	// Clock is the measured offset of the server's clock to this process's; its margin is
	// all a success acknowledged before close_at is excused by (see ClockOffset).
	Clock ClockOffset `json:"clock"`
	// NearDeadline counts the success callbacks acknowledged near their order's close_at
	// and how those orders ended.
	NearDeadline NearDeadline `json:"near_deadline"`
	// Sent counts order requests sent: Sent = Created + Σ Rejected + Errors.
	Sent int `json:"sent"`
	// Created counts the order requests that created an order (201); it equals Orders.
	Created int `json:"created"`
	// Rejected counts order requests refused with 409, by problem code: out-of-stock and
	// coupon-unavailable (OutOfStock, CouponUnavailable), both always present.
	Rejected map[string]int `json:"rejected"`
	// Errors counts order requests without a definite answer: no answer after the retries,
	// an unexpected status (each also an "HTTP:" violation), or cut short by cancellation.
	Errors int `json:"errors"`
	// SendS is the send window in seconds: from the first order request to the last answer
	// to one.
	SendS float64 `json:"send_s"`
	// MissedDeadline counts buyers of the standard flow who meant to pay or cancel in
	// time but whose payment start or cancel reached the server after the order's deadline
	// and was refused (not payable, already closed): excused, not violations, but each is a
	// payment the run meant to test and did not. A share well above 0 says the client or
	// the server was too slow for the payment timeout (see QueueWait).
	MissedDeadline int `json:"missed_deadline"`
	// QueueWait is how long the run's requests waited for one of Config.Concurrency
	// slots before being sent, in ms.
	QueueWait Percentiles `json:"queue_wait_ms"`
	// PaidShare is the share (0–1) of the standard flow's orders that ended paid, and
	// PlannedPaidShare the share whose buyer meant to pay in time: the paid share of a quiet
	// run on a machine that keeps up, the reference a faulted or loaded run is judged by.
	// Payers counts those buyers and PayersPaid those of them whose order ended paid: far
	// fewer says the run barely tested payments (Config.MinPaidShare).
	PaidShare        float64 `json:"paid_share"`
	PlannedPaidShare float64 `json:"planned_paid_share"`
	Payers           int     `json:"payers"`
	PayersPaid       int     `json:"payers_paid"`

	// OutOfStock and CouponUnavailable count orders refused with 409 for those reasons,
	// an expected outcome for scarce stock and contended coupons.
	OutOfStock        int `json:"-"`
	CouponUnavailable int `json:"-"`
	// Races counts buyers who paid in time by their clock but whose order the server closed
	// first (it inspected the payment at close_at); their money was refunded (I2).
	Races int `json:"-"`
	// Targets is the number of servers the requests were spread over.
	Targets int `json:"-"`
	// Retries counts tries sent again to a target after one that got no answer.
	Retries int `json:"-"`
	// PartialRefunds counts the merchant's partial refunds acknowledged (paid orders get
	// one or two, some returning a unit to stock).
	PartialRefunds int `json:"-"`
	// Behaviours counts the created orders per buyer behaviour.
	Behaviours map[string]int `json:"-"`
	// Verify is the database check, when Config.Store was set.
	Verify *verify.Report `json:"-"`

	// Groups is what the group_buy flow did and found; absent when the run drove no groups.
	Groups *GroupResult `json:"groups,omitempty"`
	// Wallet is what the wallet flow (wallet checkouts) did and found; absent without it.
	Wallet *WalletResult `json:"wallet,omitempty"`
	// Rides is what the ride_hailing flow did and found; absent when the run drove no trips.
	Rides *RideResult `json:"rides,omitempty"`
	// SagaFaults is how many faults (Config.FailRate, …) the server injected into saga
	// participants, when simulate runs it in process; its instances log theirs.
	SagaFaults int64 `json:"saga_faults_injected,omitempty"`

	// lateness collects closed_at − close_at of every flow's orders closed for payment
	// timeout, in ms, for Lateness.
	lateness []float64
}

// addLateness adds one order's closed_at − close_at to the lateness samples.
func (r *Result) addLateness(d time.Duration) {
	r.lateness = append(r.lateness, float64(d)/float64(time.Millisecond))
}

// NearDeadlineWindow is the window of NearDeadline: successes acknowledged this close to
// their order's close_at, either side.
const NearDeadlineWindow = time.Second

// NearDeadline counts the success callbacks acknowledged within WindowMS of their order's
// close_at, either side, and how their orders ended. A success acknowledged before close_at
// by more than the clock margin must end paid: anything else is a violation.
type NearDeadline struct {
	WindowMS float64 `json:"window_ms"`
	// Successes counts them; BeforeCloseAt those acknowledged before close_at.
	Successes     int `json:"successes"`
	BeforeCloseAt int `json:"before_close_at"`
	// Paid and Closed count how their orders ended (closed: for payment timeout, the
	// payment refunded).
	Paid   int `json:"paid"`
	Closed int `json:"closed"`
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Percentiles of a distribution in milliseconds; all 0 when it is empty.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// newPercentiles returns the nearest-rank percentiles of values (which it sorts).
func newPercentiles(values []float64) Percentiles {
	slices.Sort(values)
	return Percentiles{
		P50: percentile(values, 50),
		P90: percentile(values, 90),
		P99: percentile(values, 99),
		Max: percentile(values, 100),
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the nearest-rank
// method: the smallest value such that at least p% of the values are at or below it.
// It returns 0 for no values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Summary returns the result for a terminal, several lines, ending with a newline.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "orderly simulate: %d order requests sent in %.1f s: %d created (%.1f created/s over the send window), %d rejected, %d errors; run took %.1f s\n",
		r.Sent, r.SendS, r.Created, r.OrdersPerS, sum(r.Rejected), r.Errors, r.DurationS)
	if r.Gateway != "" {
		fmt.Fprintf(&b, "  gateway     %s\n", r.Gateway)
	}
	fmt.Fprintf(&b, "  outcome     paid %d, closed %d (payment timeout), cancelled %d, refunded payments %d\n",
		r.Paid, r.Closed, r.Cancelled, r.Refunded)
	fmt.Fprintf(&b, "  rejected    %d out of stock, %d coupon unavailable (expected: scarce stock, contended coupons)\n",
		r.OutOfStock, r.CouponUnavailable)
	fmt.Fprintf(&b, "  callbacks   %d late payments, %d duplicate callbacks, %d pay/close races\n",
		r.LatePayments, r.DuplicateCallbacks, r.Races)
	if r.Payers > 0 {
		fmt.Fprintf(&b, "  payments    %d of %d buyers who paid in time ended paid; paid share %.1f %% of orders, planned %.1f %%\n",
			r.PayersPaid, r.Payers, 100*r.PaidShare, 100*r.PlannedPaidShare)
	}
	fmt.Fprintf(&b, "  client      %d buyers reached the server after their deadline; wait for a request slot p50 %s, p99 %s, max %s\n",
		r.MissedDeadline, ms(r.QueueWait.P50), ms(r.QueueWait.P99), ms(r.QueueWait.Max))
	if r.PartialRefunds > 0 {
		fmt.Fprintf(&b, "  refunds     %d partial refunds of paid orders\n", r.PartialRefunds)
	}
	if len(r.Behaviours) > 0 {
		parts := make([]string, 0, len(r.Behaviours))
		for _, name := range slices.Concat(behaviourNames[:], memberNames[:]) {
			if n, ok := r.Behaviours[name]; ok {
				parts = append(parts, fmt.Sprintf("%s %d", name, n))
			}
		}
		fmt.Fprintf(&b, "  buyers      %s\n", strings.Join(parts, ", "))
	}
	if r.Targets > 1 || r.Retries > 0 {
		fmt.Fprintf(&b, "  targets     %d, %d tries sent again after one got no answer\n", r.Targets, r.Retries)
	}
	fmt.Fprintf(&b, "  lateness    p50 %s, p90 %s, p99 %s, max %s; early closes %d\n",
		ms(r.Lateness.P50), ms(r.Lateness.P90), ms(r.Lateness.P99), ms(r.Lateness.Max), r.EarlyCloses)
	fmt.Fprintf(&b, "  clock       server − here %+.1f ms ± %.1f ms (%s), margin %s\n",
		r.Clock.OffsetMS, r.Clock.UncertaintyMS, r.Clock.Source, ms(r.Clock.MarginMS))
	if n := r.NearDeadline; n.Successes > 0 {
		fmt.Fprintf(&b, "  deadline    %d successes acknowledged within %s of close_at (%d before it): %d paid, %d closed\n",
			n.Successes, ms(n.WindowMS), n.BeforeCloseAt, n.Paid, n.Closed)
	}
	if r.Groups != nil {
		b.WriteString(r.Groups.summary())
	}
	if v := r.Verify; v != nil {
		fmt.Fprintf(&b, "  database    %d orders, %d payments, outbox %d delivered / %d pending / %d dead\n",
			v.Orders, v.Payments, v.OutboxByState["delivered"], v.OutboxByState["pending"], v.OutboxByState["dead"])
		if v.Groups != nil {
			fmt.Fprintf(&b, "  database    %d groups succeeded, %d failed, %d forming (group rules checked)\n",
				v.Groups["succeeded"], v.Groups["failed"], v.Groups["forming"])
		}
	}
	if r.OK() {
		b.WriteString("  invariants  OK: no violation\n")
		return b.String()
	}
	fmt.Fprintf(&b, "  invariants  %d violations:\n", len(r.Violations))
	const shown = 20
	for _, v := range r.Violations[:min(len(r.Violations), shown)] {
		fmt.Fprintf(&b, "    - %s\n", v)
	}
	if len(r.Violations) > shown {
		fmt.Fprintf(&b, "    … and %d more (see the JSON result)\n", len(r.Violations)-shown)
	}
	return b.String()
}

// sum returns the sum of counts.
func sum(counts map[string]int) int {
	n := 0
	for _, v := range counts {
		n += v
	}
	return n
}

func ms(v float64) string { return fmt.Sprintf("%.0f ms", v) }
