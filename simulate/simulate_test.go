package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testenv"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

func TestMain(m *testing.M) {
	testenv.Parallel(8) // the runs wait on payment deadlines and fake servers
	goleak.VerifyTestMain(m)
}

var testSecret = []byte("simulate-test-secret")

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // 100 … 1, unsorted on purpose
	}
	tests := []struct {
		name   string
		values []float64
		want   Percentiles
	}{
		{name: "empty", values: nil, want: Percentiles{}},
		{name: "one", values: []float64{7}, want: Percentiles{P50: 7, P90: 7, P99: 7, Max: 7}},
		{name: "two", values: []float64{9, 1}, want: Percentiles{P50: 1, P90: 9, P99: 9, Max: 9}},
		{name: "ten", values: []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, want: Percentiles{P50: 5, P90: 9, P99: 10, Max: 10}},
		{name: "hundred", values: hundred, want: Percentiles{P50: 50, P90: 90, P99: 99, Max: 100}},
		{name: "negative (early closes)", values: []float64{-3, 2, 1}, want: Percentiles{P50: 1, P90: 2, P99: 2, Max: 2}},
		{name: "fractions", values: []float64{0.5, 0.25, 0.75, 1}, want: Percentiles{P50: 0.5, P90: 1, P99: 1, Max: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := newPercentiles(slices.Clone(tt.values)); got != tt.want {
				t.Errorf("newPercentiles(%v) = %+v, want %+v", tt.values, got, tt.want)
			}
		})
	}
}

// resultKeys are the members of the result JSON, exactly.
var resultKeys = []string{"cancelled", "clock", "closed", "created", "duplicate_callbacks", "duration_s", "early_closes",
	"errors", "late_payments", "lateness_ms", "missed_deadline", "near_deadline", "orders", "orders_per_s", "paid",
	"paid_share", "payers", "payers_paid", "planned_paid_share", "queue_wait_ms", "refunded", "rejected", "send_s", "sent", "violations"}

// checkResultJSON checks that res encodes with exactly the documented members.
func checkResultJSON(t *testing.T, res *Result) map[string]json.RawMessage {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, resultKeys) {
		t.Errorf("result JSON members = %v, want %v", keys, resultKeys)
	}
	var lateness map[string]float64
	if err := json.Unmarshal(m["lateness_ms"], &lateness); err != nil {
		t.Fatalf("lateness_ms: %v", err)
	}
	if len(lateness) != 4 {
		t.Errorf("lateness_ms = %v, want p50, p90, p99, max", lateness)
	}
	for _, k := range []string{"p50", "p90", "p99", "max"} {
		if _, ok := lateness[k]; !ok {
			t.Errorf("lateness_ms has no %s: %s", k, m["lateness_ms"])
		}
	}
	return m
}

func TestResultJSON(t *testing.T) {
	t.Parallel()
	res := &Result{Orders: 3, Paid: 1, Closed: 1, Cancelled: 1, Refunded: 2, LatePayments: 1, DuplicateCallbacks: 5,
		Violations: []string{}, Lateness: Percentiles{P50: 1, P90: 2, P99: 3, Max: 4}, DurationS: 1.5, OrdersPerS: 2,
		Sent: 9, Created: 3, Rejected: map[string]int{"out-of-stock": 6, "coupon-unavailable": 0}, SendS: 1.5,
		OutOfStock: 6, Behaviours: map[string]int{"cancel": 1}, MissedDeadline: 2, QueueWait: Percentiles{P90: 1, P99: 5, Max: 7},
		Clock:        ClockOffset{Source: ClockSourceDatabase, OffsetMS: 0.25, UncertaintyMS: 0.5, MarginMS: 1},
		NearDeadline: NearDeadline{WindowMS: 1000, Successes: 2, BeforeCloseAt: 1, Paid: 1, Closed: 1},
		PaidShare:    0.25, PlannedPaidShare: 0.5, Payers: 2, PayersPaid: 1}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"orders":3,"paid":1,"closed":1,"cancelled":1,"refunded":2,"late_payments":1,"duplicate_callbacks":5,` +
		`"early_closes":0,"violations":[],"lateness_ms":{"p50":1,"p90":2,"p99":3,"max":4},"duration_s":1.5,"orders_per_s":2,` +
		`"clock":{"source":"database","offset_ms":0.25,"uncertainty_ms":0.5,"margin_ms":1},` +
		`"near_deadline":{"window_ms":1000,"successes":2,"before_close_at":1,"paid":1,"closed":1},` +
		`"sent":9,"created":3,"rejected":{"coupon-unavailable":0,"out-of-stock":6},"errors":0,"send_s":1.5,` +
		`"missed_deadline":2,"queue_wait_ms":{"p50":0,"p90":1,"p99":5,"max":7},` +
		`"paid_share":0.25,"planned_paid_share":0.5,"payers":2,"payers_paid":1}`
	if string(b) != want {
		t.Errorf("result JSON\n got %s\nwant %s", b, want)
	}
	checkResultJSON(t, res)
	if s := res.Summary(); !strings.Contains(s, "invariants  OK") || !strings.Contains(s, "6 out of stock") {
		t.Errorf("summary:\n%s", s)
	}
	res.Violations = []string{"I1: order x closed early"}
	if s := res.Summary(); !strings.Contains(s, "1 violations:\n    - I1: order x closed early\n") {
		t.Errorf("summary with a violation:\n%s", s)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg     Config
		wantErr string
		seconds int64
	}{
		{cfg: Config{}, wantErr: "target: is required"},
		{cfg: Config{Target: "localhost:8080"}, wantErr: "is not an http(s) URL"},
		{cfg: Config{Target: "http://x", Orders: -1, Rate: -2}, wantErr: "orders: must not be negative"},
		{cfg: Config{Target: "http://x", MaxLateness: -time.Second}, wantErr: "max lateness: must not be negative"},
		{cfg: Config{Target: "http://x", MinCreatedShare: 1.5}, wantErr: "min created share: must be between 0 and 1"},
		{cfg: Config{Target: "http://x", MinPaidShare: -0.1}, wantErr: "min paid share: must be between 0 and 1"},
		{cfg: Config{Target: "http://x/"}, seconds: 3},
		{cfg: Config{Target: "http://x", PaymentTimeout: 1500 * time.Millisecond}, seconds: 2},
		{cfg: Config{Target: "http://x", PaymentTimeout: 200 * time.Millisecond}, seconds: 1},
		{cfg: Config{Target: "http://x", PaymentTimeout: 4 * time.Second}, seconds: 4},
	}
	for _, tt := range tests {
		cfg, err := tt.cfg.withDefaults()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%+v: error %v, want %q", tt.cfg, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.timeoutSeconds(); got != tt.seconds {
			t.Errorf("%v: timeout seconds %d, want %d", tt.cfg.PaymentTimeout, got, tt.seconds)
		}
		if cfg.Target != "http://x" || cfg.Orders != DefaultOrders || cfg.Rate != DefaultRate ||
			cfg.Concurrency != DefaultConcurrency || cfg.Drain != DefaultDrain {
			t.Errorf("defaults not applied: %+v", cfg)
		}
	}
}

func TestConfigTargets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		want     []string
		retryFor time.Duration
		wantErr  string
	}{
		{name: "Target", cfg: Config{Target: "http://a/"}, want: []string{"http://a"}},
		{name: "one of Targets", cfg: Config{Targets: []string{"http://a"}}, want: []string{"http://a"}},
		{name: "both, the same", cfg: Config{Target: "http://a", Targets: []string{"http://a/"}}, want: []string{"http://a"}},
		{name: "several", cfg: Config{Targets: []string{"http://a/", "https://b:8080"}}, want: []string{"http://a", "https://b:8080"},
			retryFor: DefaultRetryFor},
		{name: "several, retry set", cfg: Config{Targets: []string{"http://a", "http://b"}, RetryFor: time.Second},
			want: []string{"http://a", "http://b"}, retryFor: time.Second},
		{name: "one, retry set", cfg: Config{Target: "http://a", RetryFor: time.Second}, want: []string{"http://a"}, retryFor: time.Second},
		{name: "both, different", cfg: Config{Target: "http://a", Targets: []string{"http://b"}}, wantErr: "not both"},
		{name: "a bad one", cfg: Config{Targets: []string{"http://a", "b:1"}}, wantErr: `"b:1" is not an http(s) URL`},
		{name: "none", cfg: Config{Targets: []string{}}, wantErr: "target: is required"},
	}
	for _, tt := range tests {
		cfg, err := tt.cfg.withDefaults()
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case !slices.Equal(cfg.Targets, tt.want) || cfg.RetryFor != tt.retryFor:
			t.Errorf("%s: targets %q, retry for %s; want %q, %s", tt.name, cfg.Targets, cfg.RetryFor, tt.want, tt.retryFor)
		}
	}
}

func TestRunPhases(t *testing.T) {
	t.Parallel()
	var phases []string
	runFake(t, fakeOptions{}, Config{Orders: 5, Rate: 500, Seed: 2, OnPhase: func(p string) { phases = append(phases, p) }})
	if want := []string{PhaseSeed, PhaseSend, PhaseSettle}; !slices.Equal(phases, want) {
		t.Errorf("phases %v, want %v", phases, want)
	}
}

func TestPlanDeterministic(t *testing.T) {
	t.Parallel()
	a, b := newPlan(42, "p", 500, 3*time.Second), newPlan(42, "p", 500, 3*time.Second)
	c := newPlan(43, "p", 500, 3*time.Second)
	same, differ := true, false
	counts := map[behaviour]int{}
	for i := range a.orders {
		x, y, z := a.orders[i], b.orders[i], c.orders[i]
		same = same && x.behaviour == y.behaviour && slices.Equal(x.items, y.items) && x.user == y.user &&
			x.useCoupon == y.useCoupon && x.startDelay == y.startDelay && x.beforeDeadline == y.beforeDeadline
		differ = differ || x.behaviour != z.behaviour
		counts[x.behaviour]++
		if x.beforeDeadline < 100*time.Millisecond || x.beforeDeadline > 300*time.Millisecond {
			t.Errorf("order %d: before deadline %s, want 100–300 ms", i, x.beforeDeadline)
		}
		if len(x.items) == 0 {
			t.Errorf("order %d has no items", i)
		}
	}
	if !same {
		t.Error("the same seed gave two plans")
	}
	if !differ {
		t.Error("seeds 42 and 43 gave the same behaviours")
	}
	for b := range numBehaviours {
		if counts[b] == 0 {
			t.Errorf("no order plays %s", b)
		}
	}
	scarce := 0
	for _, s := range a.skus {
		if s.scarce && s.stock < s.demand {
			scarce++
		}
	}
	if len(a.skus) != numSKUs || scarce != numScarceSKUs {
		t.Errorf("%d SKUs with %d scarce, want %d with %d", len(a.skus), scarce, numSKUs, numScarceSKUs)
	}
}

// runFake runs a small simulation against a fake server.
func runFake(t *testing.T, opts fakeOptions, cfg Config) (*Result, *fakeServer) {
	t.Helper()
	f, srv := newFakeServer(t, testSecret, opts)
	cfg.Target, cfg.CallbackSecret = srv.URL, testSecret
	cfg.PaymentTimeout = cmpOr(cfg.PaymentTimeout, time.Second)
	cfg.Rate = cmpOr(cfg.Rate, 200)
	cfg.Drain = cmpOr(cfg.Drain, 3*time.Second)
	// A minute: TestRunOverloadedServerStillPays takes ~12 s alone, more beside the others
	// on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res, f
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func TestRunAgainstFake(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	res, f := runFake(t, fakeOptions{grace: 100 * time.Millisecond}, Config{Orders: 80, Seed: 7, Progress: &progress,
		MaxLateness: 2 * time.Second, MinCreatedShare: 0.8})
	if !res.OK() {
		t.Fatalf("violations against a correct server:\n%s", res.Summary())
	}
	t.Logf("\n%s", res.Summary())
	m := checkResultJSON(t, res)
	if string(m["violations"]) != "[]" {
		t.Errorf("violations encode as %s, want []", m["violations"])
	}
	if res.Sent != 80 || res.Created != res.Orders || res.Errors != 0 || res.Created+res.OutOfStock+res.CouponUnavailable != 80 ||
		res.Rejected["out-of-stock"] != res.OutOfStock || res.Rejected["coupon-unavailable"] != res.CouponUnavailable {
		t.Errorf("sent %d, created %d (orders %d), rejected %v (%d+%d), errors %d: want 80 = created + rejected",
			res.Sent, res.Created, res.Orders, res.Rejected, res.OutOfStock, res.CouponUnavailable, res.Errors)
	}
	// The rate is the created orders over the send window, both in the result.
	if res.SendS <= 0 || res.SendS > res.DurationS || math.Abs(res.OrdersPerS-float64(res.Created)/res.SendS) > 1e-9 {
		t.Errorf("orders_per_s %f, created %d, send window %f s (run %f s): want created / send window",
			res.OrdersPerS, res.Created, res.SendS, res.DurationS)
	}
	if s := res.Summary(); !strings.Contains(s, fmt.Sprintf("80 order requests sent in %.1f s: %d created (%.1f created/s over the send window)", res.SendS, res.Created, res.OrdersPerS)) {
		t.Errorf("summary does not reconcile sent, created and the rate:\n%s", s)
	}
	if res.Paid+res.Closed+res.Cancelled != res.Orders {
		t.Errorf("paid %d + closed %d + cancelled %d != orders %d", res.Paid, res.Closed, res.Cancelled, res.Orders)
	}
	f.mu.Lock()
	refundRequests := f.requests["POST /v1/orders/{id}/refunds"]
	f.mu.Unlock()
	// A buyer whose success raced the close (its order closed) asks for refunds that are
	// refused; every other refund is sent once.
	if res.PartialRefunds == 0 || refundRequests < res.PartialRefunds || (res.Races == 0 && refundRequests != res.PartialRefunds) {
		t.Errorf("partial refunds %d, refund requests %d, races %d: want some, each sent once", res.PartialRefunds, refundRequests, res.Races)
	}
	dups := res.Behaviours[payDuplicate.String()]
	if res.DuplicateCallbacks != dups*duplicateCount {
		t.Errorf("duplicate callbacks %d, want %d for %d duplicate payers", res.DuplicateCallbacks, dups*duplicateCount, dups)
	}
	if late := res.Behaviours[payLate.String()]; late == 0 || res.LatePayments != late || res.Refunded < late {
		t.Errorf("late payers %d, late payments %d, refunded %d: want every late payment sent and refunded", late, res.LatePayments, res.Refunded)
	}
	if res.Paid == 0 || res.Closed == 0 || res.Cancelled == 0 || res.EarlyCloses != 0 {
		t.Errorf("paid %d, closed %d, cancelled %d, early %d", res.Paid, res.Closed, res.Cancelled, res.EarlyCloses)
	}
	if res.Lateness.Max < res.Lateness.P50 || res.Lateness.P50 < 0 {
		t.Errorf("lateness %+v", res.Lateness)
	}
	if res.DurationS <= 0 || res.OrdersPerS <= 0 {
		t.Errorf("duration %f s, %f orders/s", res.DurationS, res.OrdersPerS)
	}
	if !strings.Contains(progress.String(), " sent ") {
		t.Errorf("no progress line: %q", progress.String())
	}
	f.mu.Lock()
	callbacks := f.requests["POST /v1/payments/callback"]
	f.mu.Unlock()
	if callbacks < res.DuplicateCallbacks+res.LatePayments {
		t.Errorf("the server saw %d callbacks", callbacks)
	}
}

func TestRunDetectsBrokenServer(t *testing.T) {
	t.Parallel()
	res, _ := runFake(t, fakeOptions{grace: 100 * time.Millisecond, earlyClose: 400 * time.Millisecond, keepLatePayments: true, leakCoupons: true,
		refundTwice: true}, Config{Orders: 60, Seed: 3, Drain: time.Second})
	if res.OK() || res.EarlyCloses == 0 {
		t.Fatalf("a broken server passed:\n%s", res.Summary())
	}
	if !slices.ContainsFunc(res.Violations, func(v string) bool {
		return strings.HasPrefix(v, "I4: ") && strings.Contains(v, "refunds; the merchant asked for")
	}) {
		t.Errorf("refunds made twice not reported:\n%s", strings.Join(res.Violations, "\n"))
	}
	for _, prefix := range []string{"I1: ", "I2: ", "I3: ", "I4: "} {
		if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.HasPrefix(v, prefix) }) {
			t.Errorf("no %s violation in:\n%s", prefix, strings.Join(res.Violations, "\n"))
		}
	}
	checkResultJSON(t, res)
}

// TestRunRefundConfirmedWhileReading: a server that confirms a refund (refund succeeded,
// pay_status partially_refunded) between the run's read of the order and its read of the
// refunds is correct; the run must not report the order read before as paid/paid after a
// confirmed refund. A server that confirms refunds without moving pay_status is still
// reported, whether the confirmation comes at once or while the run reads.
func TestRunRefundConfirmedWhileReading(t *testing.T) {
	t.Parallel()
	const stale = "want pay_status partially_refunded"
	for _, tc := range []struct {
		name string
		opts fakeOptions
		want bool // a violation containing stale
	}{
		{"confirmed while reading", fakeOptions{confirmRefundsOnRead: true}, false},
		{"pay_status kept", fakeOptions{keepPayStatus: true}, true},
		{"confirmed while reading, pay_status kept", fakeOptions{confirmRefundsOnRead: true, keepPayStatus: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.opts.grace = 100 * time.Millisecond
			res, f := runFake(t, tc.opts, Config{Orders: 60, Seed: 7})
			f.mu.Lock()
			var requested, succeeded int
			for _, list := range f.refunds {
				for _, ref := range list {
					switch ref.State {
					case orderly.RefundRequested:
						requested++
					case orderly.RefundSucceeded:
						succeeded++
					}
				}
			}
			f.mu.Unlock()
			if res.PartialRefunds == 0 || succeeded != res.PartialRefunds || requested != 0 {
				t.Fatalf("%d partial refunds acknowledged; the server has %d succeeded, %d requested: want all succeeded",
					res.PartialRefunds, succeeded, requested)
			}
			var got []string
			for _, v := range res.Violations {
				if strings.HasPrefix(v, "I4: ") && strings.HasSuffix(v, stale) {
					got = append(got, v)
				}
			}
			switch {
			case !tc.want && !res.OK():
				t.Fatalf("violations against a correct server:\n%s", strings.Join(res.Violations, "\n"))
			case tc.want && len(got) == 0:
				t.Fatalf("pay_status never moved, not reported:\n%s", strings.Join(res.Violations, "\n"))
			}
		})
	}
}

// TestRunDetectsLateCloses: with Config.MaxLateness, orders closed later than the bound
// (here all of them, 1.5 s after close_at) are one I5 violation that counts them.
func TestRunDetectsLateCloses(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	res, _ := runFake(t, fakeOptions{lateClose: 1500 * time.Millisecond}, Config{Orders: 40, Seed: 3, MaxLateness: time.Second})
	if res.Closed == 0 || res.Lateness.P50 < 1500 {
		t.Fatalf("closed %d, lateness %+v: want closes 1.5 s late", res.Closed, res.Lateness)
	}
	want := fmt.Sprintf("I5: %d orders closed more than the lateness bound 1s after their close_at", res.Closed)
	if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.HasPrefix(v, want) }) {
		t.Fatalf("no violation starts with %q:\n%s", want, strings.Join(res.Violations, "\n"))
	}
}

// TestRunDetectsWrongRefusals: a server refusing orders as out of stock although they ask
// only for SKUs stocked above the run's demand is reported, and so is a created share below
// the minimum.
func TestRunDetectsWrongRefusals(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	n := 0
	res, _ := runFake(t, fakeOptions{refuse: func() bool { n++; return n%3 == 0 }}, Config{Orders: 60, Seed: 3, MinCreatedShare: 0.8})
	var wrong int
	for _, v := range res.Violations {
		if strings.HasPrefix(v, "refused: order ") && strings.Contains(v, "was refused out-of-stock, but it asks only for SKUs stocked above") {
			wrong++
		}
	}
	if wrong == 0 || wrong > 20 || !slices.ContainsFunc(res.Violations, func(v string) bool {
		return strings.HasPrefix(v, "refused: the server created") && strings.HasSuffix(v, "below the minimum share 80.0 %")
	}) {
		t.Fatalf("%d wrong refusals reported (want 1–20, the third of 60 orders that ask for no scarce SKU):\n%s", wrong, strings.Join(res.Violations, "\n"))
	}
}

// TestRunDetectsMissingLatePayment: a late payment the server acknowledged but left out of
// the order's payments is a violation, not a silent pass.
func TestRunDetectsMissingLatePayment(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	res, _ := runFake(t, fakeOptions{grace: 100 * time.Millisecond, hideLatePayments: true}, Config{Orders: 60, Seed: 3, Drain: time.Second})
	late := res.Behaviours[payLate.String()]
	var missing []string
	for _, v := range res.Violations {
		if strings.HasPrefix(v, "I2: ") && strings.Contains(v, "(pay_late): its late payment") && strings.HasSuffix(v, "is missing from the order's payments") {
			missing = append(missing, v)
		}
	}
	if late == 0 || len(missing) != res.LatePayments {
		t.Fatalf("%d late payers, %d late payments sent, %d reported missing:\n%s", late, res.LatePayments, len(missing), strings.Join(res.Violations, "\n"))
	}
}

func TestRunWrongSecret(t *testing.T) {
	t.Parallel()
	_, srv := newFakeServer(t, []byte("another secret"), fakeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{Target: srv.URL, CallbackSecret: testSecret, Orders: 10, Rate: 500, PaymentTimeout: time.Second, Seed: 1, Drain: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.Contains(v, "401 unauthorized") }) {
		t.Errorf("refused callbacks not reported:\n%s", res.Summary())
	}
}

func TestRunCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, srv := newFakeServer(t, testSecret, fakeOptions{onOrder: func(n int) {
		if n == 20 {
			cancel()
		}
	}})
	// A run that went on after the cancel would send for 5 s and then wait for the orders'
	// 60 s deadlines: stopping well within 30 s shows it did not, with room for a loaded
	// machine (a 5 s bound flaked at 5.3 s).
	start := time.Now()
	res, err := Run(ctx, Config{Target: srv.URL, CallbackSecret: testSecret, Orders: 1000, Rate: 200, PaymentTimeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Run took %s to stop; it waits for deadlines after a cancel", d)
	}
	if res == nil || res.Sent < 20 || res.Sent >= 1000 {
		t.Errorf("result %+v, want a partial one", res)
	}
}

func TestRunUnreachable(t *testing.T) {
	t.Parallel()
	_, srv := newFakeServer(t, testSecret, fakeOptions{})
	srv.Close()
	if _, err := Run(context.Background(), Config{Target: srv.URL, Orders: 1}); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("error %v, want a seed error", err)
	}
}

// TestRunWithStore checks the wiring of Config.Store: the fake server keeps its state in
// memory, so the (empty) database lacks the run's SKUs, and verify.Check must say so.
func TestRunWithStore(t *testing.T) {
	t.Parallel()
	db, err := sqlstore.Open(context.Background(), sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	res, _ := runFake(t, fakeOptions{grace: 100 * time.Millisecond}, Config{Orders: 10, Rate: 500, Seed: 5, Store: db})
	if res.Verify == nil || res.Verify.Orders != 0 {
		t.Fatalf("verify report %+v, want one of the empty database", res.Verify)
	}
	if !slices.ContainsFunc(res.Violations, func(v string) bool {
		return strings.HasPrefix(v, "I4 (database): sku ") && strings.HasSuffix(v, "but has no stock row")
	}) {
		t.Errorf("the database check's violations are missing:\n%s", res.Summary())
	}
	if !strings.Contains(res.Summary(), "database    0 orders") {
		t.Errorf("summary:\n%s", res.Summary())
	}
}

// TestMeasureStoreClock: the offset of a database whose clock runs 2.5 s ahead is measured
// to within the reported uncertainty, and the margin covers it.
func TestMeasureStoreClock(t *testing.T) {
	t.Parallel()
	const ahead = 2500 * time.Millisecond
	db, err := sqlstore.Open(context.Background(), sqlstore.Config{URL: sqlitetest.Path(t),
		Now: func() time.Time { return time.Now().Add(ahead) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c, ok := measureStoreClock(context.Background(), db)
	if !ok {
		t.Fatal("no measurement")
	}
	got := time.Duration(c.OffsetMS * float64(time.Millisecond))
	if c.Source != ClockSourceDatabase || (got-ahead).Abs() > time.Duration(c.UncertaintyMS*float64(time.Millisecond)) ||
		c.UncertaintyMS < 0.5 || c.margin() < ahead {
		t.Fatalf("clock %+v, want an offset of %s within its uncertainty and a margin covering it", c, ahead)
	}
}

func TestNewClockOffset(t *testing.T) {
	t.Parallel()
	c := newClockOffset(ClockSourceHTTPDate, -1200*time.Microsecond, 300*time.Microsecond)
	if c != (ClockOffset{Source: ClockSourceHTTPDate, OffsetMS: -1.2, UncertaintyMS: 0.3, MarginMS: 2}) || c.margin() != 2*time.Millisecond {
		t.Fatalf("clock %+v, margin %s; want offset -1.2 ms ± 0.3 ms, margin rounded up to 2 ms", c, c.margin())
	}
}
