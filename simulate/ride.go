package simulate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/store"
)

func init() {
	RegisterFlow(flowRideHailing, func() FlowDriver { return &rideFlow{} })
	excludeFromMixed(flowRideHailing)
}

const (
	flowRideHailing = "ride_hailing"
	// ridePlatform is the platform's role account (ride.DefaultPlatformAccount in USD).
	ridePlatform = "role:USD:ride_platform"
)

// Scripts of simulated trips: how far the trip goes before the rider cancels, or whether it
// is refunded after settlement.
const (
	scriptComplete       = "complete"        // assign, start, end with a fare within ±50 % of the estimate
	scriptCancelRequest  = "cancel_request"  // cancel before a driver is assigned (free)
	scriptCancelAssigned = "cancel_assigned" // cancel after assignment (fee)
	scriptCancelInTrip   = "cancel_in_trip"  // cancel on board (fee)
	scriptRefund         = "refund"          // complete, then a full refund once settled
)

// plannedTrip is one trip of the plan.
type plannedTrip struct {
	script   string
	estimate int64
	fare     int64
}

// rideTrip is a trip as the server shows it (GET /v1/trips/{id}).
type rideTrip struct {
	orderly.Trip
	HoldExpiresAt string `json:"hold_expires_at"`
	CreatedAt     string `json:"created_at"`
	UpdatedAt     string `json:"updated_at"`
}

// trackedTrip is a planned trip and what the server answered.
type trackedTrip struct {
	pt      *plannedTrip
	driver  string
	id      string
	final   *rideTrip
	sagas   map[string]string // saga id → state, at rest
	settled bool
	notes   []string // why a planned refund was not sent (the trip was not settled)
}

// RideResult is what the ride_hailing flow did and found.
type RideResult struct {
	Trips      int            `json:"trips"`
	ByState    map[string]int `json:"by_state"`
	ByScript   map[string]int `json:"by_script"`
	Sagas      map[string]int `json:"sagas"` // by state, payment and refund sagas
	Captured   int64          `json:"captured"`
	Released   int64          `json:"released"`
	Extra      int64          `json:"extra_charged"`
	Collection int64          `json:"collection_due"`
	Refunded   int64          `json:"refunded"`
	Errors     int            `json:"errors"`
}

// rideFlow drives the ride_hailing flow (docs/flows/ride-hailing.md): riders request trips
// at the run's pace with an estimate of 10.00–60.00; drivers accept and drive them; the
// fare is the estimate ± 50 % (so some fares are above the hold of estimate + 25 %); some
// riders cancel before or after assignment or on board, some settled trips are refunded.
// Failures, slowness and lost gateway replies are injected into the server's saga
// participants (Config.FailRate, …, given to the server it starts). At rest every trip is
// checked: its sagas ended (I8; stuck counts, with its alert), its hold resolved once with
// held = captured + released and never more captured than held, what it says captured,
// charged and refunded is what the gateway did (no double capture: one capture key per
// hold), and the driver's wallet holds exactly the trip's payout.
type rideFlow struct {
	*runner
	plan  []*plannedTrip
	trips []*trackedTrip

	sent, created, ended, errs atomic.Int64
	platformBefore             int64
}

func (f *rideFlow) Plan(r *runner, orders int) {
	f.runner = r
	rng := rand.New(rand.NewPCG(uint64(r.cfg.Seed), 0x7269_6465)) //nolint:gosec // "ride": a reproducible plan, not a secret
	for range orders {
		pt := &plannedTrip{estimate: 1000 + 100*rng.Int64N(51)}
		pt.fare = pt.estimate/2 + rng.Int64N(pt.estimate+1) // estimate ± 50 %
		switch x := rng.IntN(100); {
		case x < 70:
			pt.script = scriptComplete
		case x < 78:
			pt.script = scriptCancelRequest
		case x < 86:
			pt.script = scriptCancelAssigned
		case x < 92:
			pt.script = scriptCancelInTrip
		default:
			pt.script = scriptRefund
		}
		f.plan = append(f.plan, pt)
	}
}

func (f *rideFlow) Seed(ctx context.Context, _ *runner) error {
	var err error
	f.platformBefore, err = f.balance(ctx, ridePlatform)
	return err
}

// balance returns wallet account id's available balance, 0 without the account.
func (f *rideFlow) balance(ctx context.Context, id string) (int64, error) {
	var a struct {
		Available int64 `json:"available"`
	}
	err := f.c.do(ctx, http.MethodGet, "/v1/wallet-accounts/"+url.PathEscape(id), nil, nil, &a)
	var he *httpError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		return 0, nil
	}
	return a.Available, err
}

func (f *rideFlow) Drive(ctx context.Context, _ *runner) {
	f.trips = make([]*trackedTrip, len(f.plan))
	rate := f.rate(len(f.plan))
	sem := make(chan struct{}, max(f.cfg.Concurrency, 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, pt := range f.plan {
		if sleepUntil(ctx, f.sendStart.Add(time.Duration(float64(i)/rate*float64(time.Second)))) != nil {
			return
		}
		tt := &trackedTrip{pt: pt, driver: fmt.Sprintf("%s-driver-%d", f.prefix, i)}
		f.trips[i] = tt
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f.play(ctx, tt, i); err != nil && ctx.Err() == nil {
				f.errs.Add(1)
				f.httpProblem("trip %d (%s): %v", i, tt.pt.script, err)
			}
		})
	}
}

// rideAfter are, per trip event, the states a trip can be in once the event took effect
// (and what followed it: the payment saga runs on its own after end).
var rideAfter = map[string][]orderly.State{
	"assign": {"driver_assigned", "in_trip", "trip_ended", "paid", "settled", "closed"},
	"start":  {"in_trip", "trip_ended", "paid", "settled", "closed"},
	"end":    {"trip_ended", "paid", "settled", "refunding", "refunded"},
	"cancel": {"closed"},
	"refund": {"refunding", "refunded"},
}

// play runs one trip's script.
func (f *rideFlow) play(ctx context.Context, tt *trackedTrip, i int) error {
	f.sent.Add(1)
	var t rideTrip
	err := f.c.do(ctx, http.MethodPost, "/v1/trips", map[string]any{"rider_id": fmt.Sprintf("%s-rider-%d", f.prefix, i),
		"currency": "USD", "estimate": tt.pt.estimate}, nil, &t)
	if err != nil {
		return err
	}
	f.created.Add(1)
	f.answered()
	tt.id = t.ID
	path := "/v1/trips/" + url.PathEscape(t.ID)
	event := func(name string, body any) error {
		err := f.c.do(ctx, http.MethodPost, path+"/"+name, body, nil, &t)
		if !maybeAppliedBefore(err) {
			return err
		}
		// An instance died after applying the event but before answering, and the request
		// sent again found the trip past it: the first try took effect.
		var now rideTrip
		if gerr := f.c.do(ctx, http.MethodGet, path, nil, nil, &now); gerr != nil {
			return err
		}
		if !slices.Contains(rideAfter[name], now.State) {
			return err
		}
		t = now
		return nil
	}
	if tt.pt.script == scriptCancelRequest {
		return event("cancel", nil)
	}
	if err := event("assign", map[string]string{"driver_id": tt.driver}); err != nil {
		return err
	}
	if tt.pt.script == scriptCancelAssigned {
		return event("cancel", nil)
	}
	if err := event("start", nil); err != nil {
		return err
	}
	if tt.pt.script == scriptCancelInTrip {
		return event("cancel", nil)
	}
	if err := event("end", map[string]int64{"fare": tt.pt.fare}); err != nil {
		return err
	}
	f.ended.Add(1)
	if tt.pt.script != scriptRefund {
		return nil
	}
	for t.State != "settled" { // the payment saga may wait for a retry
		if t.State != "trip_ended" && t.State != "paid" {
			tt.notes = append(tt.notes, "not refunded: the trip ended "+string(t.State))
			return nil
		}
		if err := sleepUntil(ctx, time.Now().Add(50*time.Millisecond)); err != nil {
			return err
		}
		if err := f.c.do(ctx, http.MethodGet, path, nil, nil, &t); err != nil {
			return err
		}
		if t.State == "trip_ended" && t.CollectionDue > 0 {
			tt.notes = append(tt.notes, "not refunded: uncollected")
			return nil
		}
	}
	return event("refund", nil)
}

func (f *rideFlow) LastDeadline() time.Time { return f.sendStart }

// Settle reads every trip and its sagas; a trip is at rest when its sagas ended or are stuck.
func (f *rideFlow) Settle(ctx context.Context, _ *runner) bool {
	rest := true
	for _, tt := range f.trips {
		if tt == nil || tt.id == "" || tt.settled {
			continue
		}
		var t rideTrip
		if err := f.c.do(ctx, http.MethodGet, "/v1/trips/"+url.PathEscape(tt.id), nil, nil, &t); err != nil {
			rest = false
			continue
		}
		tt.final, tt.sagas = &t, map[string]string{}
		ended := true
		for _, id := range []string{t.PaymentSagaID, t.RefundSagaID} {
			if id == "" {
				continue
			}
			var s struct {
				State string `json:"state"`
			}
			if err := f.c.do(ctx, http.MethodGet, "/v1/sagas/"+url.PathEscape(id), nil, nil, &s); err != nil {
				ended = false
				continue
			}
			tt.sagas[id] = s.State
			if s.State == "running" || s.State == "compensating" {
				ended = false
			}
		}
		if ended && (t.State == "requested" || t.State == "refunding" || t.State == "paid") {
			ended = false
		}
		tt.settled = ended
		rest = rest && ended
	}
	return rest
}

func (f *rideFlow) Check(_ *runner, res *Result) {
	rr := &RideResult{ByState: map[string]int{}, ByScript: map[string]int{}, Sagas: map[string]int{}, Errors: int(f.errs.Load())}
	res.Rides = rr
	ctx := context.Background()
	var fees int64 // the platform fees the trips keep
	for i, tt := range f.trips {
		if tt == nil || tt.id == "" {
			continue
		}
		t := tt.final
		if t == nil {
			res.Violations = append(res.Violations, fmt.Sprintf("R: trip %d (%s) %s never read at rest", i, tt.pt.script, tt.id))
			continue
		}
		rr.Trips++
		rr.ByState[string(t.State)]++
		rr.ByScript[tt.pt.script]++
		rr.Captured += t.Captured
		rr.Released += t.Released
		rr.Extra += t.ExtraCharged
		rr.Collection += t.CollectionDue
		rr.Refunded += t.Refunded
		bad := func(inv, format string, args ...any) {
			res.Violations = append(res.Violations, fmt.Sprintf("%s: trip %s (%s): ", inv, t.ID, tt.pt.script)+fmt.Sprintf(format, args...))
		}
		for id, st := range tt.sagas {
			rr.Sagas[st]++
			if st != "succeeded" && st != "compensated" && st != "stuck" {
				bad("I8", "saga %s is %s at rest", id, st)
			}
		}
		// Money of the trip as it says.
		switch {
		case t.Captured > t.HoldAmount:
			bad("M", "captured %d from a hold of %d", t.Captured, t.HoldAmount)
		case t.Captured+t.Released != t.HoldAmount: // at rest, every hold is accounted, whatever ended the trip
			bad("M", "held %d ≠ captured %d + released %d", t.HoldAmount, t.Captured, t.Released)
		}
		switch t.State {
		case "settled", "refunded":
			if t.Captured+t.ExtraCharged != t.Fare || t.DriverPayout+t.PlatformFee != t.Fare {
				bad("M", "fare %d: captured %d + extra %d, payout %d + fee %d", t.Fare, t.Captured, t.ExtraCharged, t.DriverPayout, t.PlatformFee)
			}
		case "trip_ended":
			if t.CollectionDue != t.Fare || t.Captured != 0 {
				bad("M", "trip_ended at rest with collection_due %d (fare %d) and captured %d", t.CollectionDue, t.Fare, t.Captured)
			}
		case "closed":
			if t.Captured != t.CancellationFee && t.CollectionDue == 0 && t.CloseReason == "rider_cancelled" {
				bad("M", "cancelled with fee %d but captured %d", t.CancellationFee, t.Captured)
			}
		default:
			bad("M", "trip at rest in %s", t.State)
		}
		// The gateway agrees (its holds are in the database, whichever instance placed
		// them): the hold resolved once, one capture key, nothing refunded but what the
		// trip says.
		if f.cfg.Store != nil {
			h, keys, err := f.gatewayHold(ctx, t.HoldID)
			switch {
			case orderly.ErrorCode(err) == orderly.ENOTFOUND:
				bad("M", "the gateway has no hold %s", t.HoldID)
			case err != nil:
				bad("DB", "hold %s: %v", t.HoldID, err)
			default:
				var captureKeys int
				var refunded int64
				for _, k := range keys {
					switch k.Op {
					case string(sim.GatewayCaptureHold):
						captureKeys++
					case string(sim.GatewayRefund):
						refunded += k.Amount
					}
				}
				if h.State == orderly.HoldPending && t.State != "requested" {
					bad("M", "hold still pending at rest")
				}
				if h.Captured+h.Released != h.Amount && h.State != orderly.HoldPending {
					bad("M", "gateway hold %d ≠ captured %d + released %d", h.Amount, h.Captured, h.Released)
				}
				if refunded != h.Refunded {
					bad("M", "gateway hold refunded %d, its refund keys add up to %d", h.Refunded, refunded)
				}
				if net := h.Captured - h.Refunded; net != t.Captured-min(t.Refunded, t.Captured) {
					bad("M", "the gateway kept %d of the hold (captured %d, refunded %d), the trip says %d captured, %d refunded",
						net, h.Captured, h.Refunded, t.Captured, t.Refunded)
				}
				if captureKeys > 1 {
					bad("M", "hold captured under %d keys (double capture)", captureKeys)
				}
			}
		}
		// The driver's wallet holds the payout, or nothing after a refund.
		if t.DriverID != "" {
			want := t.DriverPayout
			if t.State == "refunded" {
				want = 0
			}
			got, err := f.balance(ctx, "role:USD:driver:"+t.DriverID)
			if err != nil {
				bad("HTTP", "driver wallet: %v", err)
			} else if got != want {
				bad("M", "driver %s holds %d, want %d", t.DriverID, got, want)
			}
		}
		if t.State != "refunded" {
			fees += t.PlatformFee
		}
	}
	if after, err := f.balance(ctx, ridePlatform); err != nil {
		res.Violations = append(res.Violations, fmt.Sprintf("HTTP: the platform's wallet: %v", err))
	} else if after-f.platformBefore != fees {
		res.Violations = append(res.Violations, fmt.Sprintf("M: the platform's wallet grew by %d, the trips' fees add up to %d", after-f.platformBefore, fees))
	}
	res.Orders += rr.Trips
	res.Sent += int(f.sent.Load())
	res.Created += int(f.created.Load())
	res.Errors += rr.Errors
}

// gatewayHold reads a hold of the simulated gateway from the database as the gateway sees
// it now and the keys that applied something to it (sim.ReadHold).
func (f *rideFlow) gatewayHold(ctx context.Context, id string) (h *orderly.Hold, keys []*sim.HoldKey, err error) {
	err = f.cfg.Store.Read(ctx, func(tx store.Tx) error {
		h, keys, err = sim.ReadHold(ctx, tx, id)
		return err
	})
	return h, keys, err
}

// Payments returns no order payments (trips are paid by holds, checked by Check) and, as
// the keys the run's refund-ledger check must leave to this flow, those of every refund of
// a trip's holds.
func (f *rideFlow) Payments() ([]FinalPayment, []string) {
	if f.cfg.GatewayLedger == nil {
		return nil, nil
	}
	ids := map[string]bool{}
	for _, tt := range f.trips {
		if tt != nil && tt.id != "" {
			ids[tt.id], ids[tt.id+"/extra"] = true, true
		}
	}
	var keys []string
	for _, c := range f.cfg.GatewayLedger() {
		if c.Op == sim.GatewayRefund && ids[c.PaymentID] && !slices.Contains(keys, c.IdempotencyKey) {
			keys = append(keys, c.IdempotencyKey)
		}
	}
	return nil, keys
}

func (f *rideFlow) Progress() string {
	return fmt.Sprintf("trips sent %d/%d created %d ended %d errors %d", f.sent.Load(), len(f.plan), f.created.Load(), f.ended.Load(), f.errs.Load())
}
