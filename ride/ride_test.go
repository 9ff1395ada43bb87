package ride_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/fault"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testenv"
	"github.com/orderlyhq/orderly/ride"
	"github.com/orderlyhq/orderly/saga"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is a started engine on a fresh SQLite file and its services.
type bundle struct {
	e     *engine.Engine
	rides *ride.Service
	gw    *sim.Gateway
}

func setup(t *testing.T) *bundle { t.Helper(); return setupURL(t, "") }

// setupURL is setup on the database of url (a fresh SQLite file for "").
func setupURL(t *testing.T, url string) *bundle {
	t.Helper()
	if url == "" {
		url = sqlitetest.Path(t)
	}
	gw := sim.New()
	e, err := engine.Open(t.Context(), engine.Config{
		DatabaseURL: url, CallbackSecret: []byte("s"), Gateway: gw,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &bundle{e: e, rides: e.Service(ride.FlowName).(*ride.Service), gw: gw}
}

// inTrip creates a trip of estimate 4000 (hold 5000), assigns driver d and starts it.
func (b *bundle) inTrip(t *testing.T, driver string) *orderly.Trip {
	t.Helper()
	ctx := t.Context()
	tr, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "rider-" + driver, Currency: "USD", Estimate: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if tr.HoldAmount != 5000 || tr.State != ride.StateRequested {
		t.Fatalf("created %s with hold %d, want requested with 5000", tr.State, tr.HoldAmount)
	}
	if _, err := b.rides.AssignDriver(ctx, tr.ID, driver); err != nil {
		t.Fatal(err)
	}
	if tr, err = b.rides.StartTrip(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	return tr
}

// waitState polls trip id until it is in state want (the saga's retries run on the timer).
func (b *bundle) waitState(t *testing.T, id string, want orderly.State) *orderly.Trip {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // backoff after a run of injected failures

	for {
		tr, err := b.rides.Trip(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tr.State == want {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("trip %s is %s after a minute, want %s", id, tr.State, want)
		}
		time.Sleep(10 * time.Millisecond) // polling the condition
	}
}

// balance returns the available USD balance of driver who's role account, or of the
// platform's for ride.DefaultPlatformAccount (0 without the account).
func (b *bundle) balance(t *testing.T, who string) int64 {
	t.Helper()
	ref := ride.DriverAccount(who, "USD")
	if who == ride.DefaultPlatformAccount {
		ref = orderly.RoleAccount(who, "USD")
	}
	a, err := b.e.Wallets().Account(t.Context(), ref.ID())
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		return 0
	} else if err != nil {
		t.Fatal(err)
	}
	return a.Available
}

// applied returns the calls of op on hold id that moved money (not replays, not refused).
func (b *bundle) calls(op sim.GatewayOp, id string) int {
	return len(b.gw.Calls(op, id))
}

func checkHold(t *testing.T, h *orderly.Hold, state orderly.HoldState, captured, released int64) {
	t.Helper()
	if h.State != state || h.Captured != captured || h.Released != released {
		t.Fatalf("hold %s: %s captured %d released %d, want %s %d %d", h.ID, h.State, h.Captured, h.Released, state, captured, released)
	}
}

// TestFareWithinHold: hold 5000, fare 3820 → 3820 captured and 1180 released in one call,
// once, also when the capture's reply is lost and the saga retries it; the driver gets
// 3820 − 20 % and the platform 20 %.
func TestFareWithinHold(t *testing.T) {
	t.Parallel()
	for _, lost := range []bool{false, true} {
		b := setup(t)
		if lost {
			if err := b.gw.TimeoutAfterApply(t.Context(), sim.GatewayCaptureHold, 1); err != nil {
				t.Fatal(err)
			}
		}
		tr := b.inTrip(t, "driver-1")
		if _, err := b.rides.EndTrip(t.Context(), tr.ID, 3820); err != nil {
			t.Fatal(err)
		}
		tr = b.waitState(t, tr.ID, ride.StateSettled)
		if tr.Fare != 3820 || tr.Captured != 3820 || tr.Released != 1180 || tr.ExtraCharged != 0 || tr.CollectionDue != 0 {
			t.Fatalf("lost=%v: trip %+v", lost, tr)
		}
		if tr.PlatformFee != 764 || tr.DriverPayout != 3056 {
			t.Fatalf("lost=%v: platform fee %d driver payout %d, want 764 3056", lost, tr.PlatformFee, tr.DriverPayout)
		}
		h, _ := b.gw.Hold(t.Context(), tr.HoldID)
		checkHold(t, h, orderly.HoldPosted, 3820, 1180)
		if n := b.calls(sim.GatewayCaptureHold, tr.HoldID); n != 1 {
			t.Fatalf("lost=%v: %d captures applied, want 1", lost, n)
		}
		if lost {
			var replays int
			for _, c := range b.gw.Ledger() {
				if c.Op == sim.GatewayCaptureHold && c.PaymentID == tr.HoldID && c.Replay {
					replays++
					if c.IdempotencyKey != tr.PaymentSagaID+"/capture/action" {
						t.Fatalf("retry key %q, want the operation's", c.IdempotencyKey)
					}
				}
			}
			if replays != 1 {
				t.Fatalf("%d replays of the capture, want 1 (the retry after the lost reply)", replays)
			}
		}
		if got := b.balance(t, "driver-1"); got != 3056 {
			t.Fatalf("lost=%v: driver balance %d, want 3056", lost, got)
		}
		if got := b.balance(t, ride.DefaultPlatformAccount); got != 764 {
			t.Fatalf("lost=%v: platform balance %d, want 764", lost, got)
		}
		in, _, err := b.e.Sagas().Get(t.Context(), tr.PaymentSagaID)
		if err != nil || in.State != saga.StateSucceeded {
			t.Fatalf("lost=%v: payment saga %v %v", lost, in, err)
		}
	}
}

// TestFareAboveHold: fare 6100 on a hold of 5000 → the hold is captured in full, never
// more, and the 1100 beyond it is charged as a second payment.
func TestFareAboveHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.inTrip(t, "driver-2")
	if _, err := b.rides.EndTrip(t.Context(), tr.ID, 6100); err != nil {
		t.Fatal(err)
	}
	tr = b.waitState(t, tr.ID, ride.StateSettled)
	if tr.Captured != 5000 || tr.Released != 0 || tr.ExtraCharged != 1100 {
		t.Fatalf("captured %d released %d extra %d, want 5000 0 1100", tr.Captured, tr.Released, tr.ExtraCharged)
	}
	h, _ := b.gw.Hold(t.Context(), tr.HoldID)
	checkHold(t, h, orderly.HoldPosted, 5000, 0)
	extra, err := b.gw.Hold(t.Context(), tr.HoldID+"/extra")
	if err != nil {
		t.Fatalf("no second payment at the gateway: %v", err)
	}
	checkHold(t, extra, orderly.HoldPosted, 1100, 0)
	for _, c := range b.gw.Ledger() {
		if c.Op == sim.GatewayCaptureHold && c.PaymentID == tr.HoldID && c.Amount > 5000 {
			t.Fatalf("a capture of %d was sent for a hold of 5000", c.Amount)
		}
	}
	if got := b.balance(t, "driver-2"); got != 4880 {
		t.Fatalf("driver balance %d, want 4880 (6100 − 20 %%)", got)
	}
}

// TestCaptureAfterExpiry: the fare is posted 1 ms after the hold's expiry, which the gateway
// has not processed yet → refused; the hold is released once (expired), nothing is
// captured, the trip stays trip_ended flagged for collection, the saga is compensated.
func TestCaptureAfterExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.inTrip(t, "driver-3")
	h, _ := b.gw.Hold(t.Context(), tr.HoldID)
	if h.State != orderly.HoldPending {
		t.Fatalf("hold %s before the end, want pending", h.State)
	}
	b.gw.SetClock(func() time.Time { return h.ExpiresAt.Add(time.Millisecond) })
	got, err := b.rides.EndTrip(t.Context(), tr.ID, 3820)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ride.StateTripEnded || got.CollectionDue != 3820 || got.Captured != 0 {
		t.Fatalf("trip %s collection_due %d captured %d, want trip_ended 3820 0", got.State, got.CollectionDue, got.Captured)
	}
	in, log, err := b.e.Sagas().Get(t.Context(), got.PaymentSagaID)
	if err != nil || in.State != saga.StateCompensated {
		t.Fatalf("payment saga %+v %v, want compensated", in, err)
	}
	if log[0].Outcome != saga.OutcomeBusinessFailure {
		t.Fatalf("capture outcome %s, want business_failure (not retried)", log[0].Outcome)
	}
	h, _ = b.gw.Hold(t.Context(), tr.HoldID)
	checkHold(t, h, orderly.HoldExpired, 0, 5000)
	if n := b.calls(sim.GatewayCaptureHold, tr.HoldID); n != 1 {
		t.Fatalf("%d capture calls, want the 1 refused", n)
	}
	if got := b.balance(t, "driver-3"); got != 0 {
		t.Fatalf("driver credited %d for an uncollected fare", got)
	}
	// Ending it again (a retried request) charges nothing more.
	if _, err := b.rides.EndTrip(t.Context(), tr.ID, 3820); err != nil {
		t.Fatal(err)
	}
	if n := b.calls(sim.GatewayCaptureHold, tr.HoldID); n != 1 {
		t.Fatalf("%d capture calls after a repeated end, want 1", n)
	}
}

// TestCancel: a requested trip cancels free (the hold voided once); after assignment the
// cancellation fee (500) is captured, the rest released, the fee settled.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tr, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "r", Currency: "USD", Estimate: 4000})
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = b.rides.CancelTrip(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	if tr.State != orderly.StateClosed || tr.CloseReason != string(ride.CloseReasonRiderCancelled) || tr.Released != 5000 || tr.Captured != 0 {
		t.Fatalf("cancelled requested trip %+v", tr)
	}
	h, _ := b.gw.Hold(t.Context(), tr.HoldID)
	checkHold(t, h, orderly.HoldVoided, 0, 5000)
	if n := b.calls(sim.GatewayVoidHold, tr.HoldID); n != 1 {
		t.Fatalf("%d voids, want 1", n)
	}
	if _, err := b.rides.CancelTrip(ctx, tr.ID); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("second cancel: %v, want EILLEGAL", err)
	}
	if n := b.calls(sim.GatewayVoidHold, tr.HoldID); n != 1 {
		t.Fatalf("%d voids after a second cancel, want 1", n)
	}

	tr = b.inTrip(t, "driver-4")
	if tr, err = b.rides.CancelTrip(ctx, tr.ID); err != nil {
		t.Fatal(err)
	}
	if tr.CancellationFee != 500 || tr.Captured != 500 || tr.Released != 4500 || tr.DriverPayout != 400 || tr.PlatformFee != 100 {
		t.Fatalf("cancelled in_trip trip %+v", tr)
	}
	h, _ = b.gw.Hold(t.Context(), tr.HoldID)
	checkHold(t, h, orderly.HoldPosted, 500, 4500)
	if got := b.balance(t, "driver-4"); got != 400 {
		t.Fatalf("driver balance %d, want 400", got)
	}
}

// TestRefundAfterSettlement: a refund of a settled trip reverses the driver's and the
// platform's credits and refunds the card once.
func TestRefundAfterSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tr := b.inTrip(t, "driver-5")
	if _, err := b.rides.EndTrip(t.Context(), tr.ID, 3820); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, tr.ID, ride.StateSettled)
	tr, err := b.rides.RefundTrip(t.Context(), tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if tr.State != ride.StateRefunded || tr.Refunded != 3820 {
		t.Fatalf("refunded trip %s refunded %d, want refunded 3820", tr.State, tr.Refunded)
	}
	if d, p := b.balance(t, "driver-5"), b.balance(t, ride.DefaultPlatformAccount); d != 0 || p != 0 {
		t.Fatalf("after the refund the driver has %d and the platform %d, want 0 and 0", d, p)
	}
	h, err := b.gw.Hold(t.Context(), tr.HoldID)
	if err != nil || h.Refunded != 3820 {
		t.Fatalf("card refunded %+v (%v), want 3820", h, err)
	}
	keys, err := b.gw.HoldKeys(t.Context(), tr.HoldID)
	if err != nil || len(keys) != 2 || keys[1].Key != tr.RefundSagaID+"/refund/action" || keys[1].Amount != 3820 {
		t.Fatalf("keys of the hold %v (%v), want a capture and one refund of 3820 under the refund step's key", keys, err)
	}
	if _, err := b.rides.RefundTrip(t.Context(), tr.ID); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("second refund: %v, want EILLEGAL", err)
	}
}

// TestIllegalAndInvalid: events the state does not take are EILLEGAL; bad input EINVALID.
func TestIllegalAndInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tr, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "r", Currency: "USD", Estimate: 100})
	if err != nil {
		t.Fatal(err)
	}
	if tr.HoldAmount != 125 {
		t.Fatalf("hold %d for 100, want 125", tr.HoldAmount)
	}
	if _, err := b.rides.StartTrip(ctx, tr.ID); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("start of a requested trip: %v", err)
	}
	if _, err := b.rides.EndTrip(ctx, tr.ID, 100); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("end of a requested trip: %v", err)
	}
	for _, p := range []orderly.CreateTripParams{
		{RiderID: "", Currency: "USD", Estimate: 1}, {RiderID: "r", Currency: "usd", Estimate: 1},
		{RiderID: "r", Currency: "USD", Estimate: 0}, {RiderID: "r", Currency: "USD", Estimate: 1, PaymentMethod: "cash"},
	} {
		if _, err := b.rides.CreateTrip(ctx, &p); orderly.ErrorCode(err) != orderly.EINVALID {
			t.Fatalf("%+v: %v, want EINVALID", p, err)
		}
	}
	if _, err := b.rides.EndTrip(ctx, tr.ID, 0); orderly.ErrorCode(err) != orderly.EINVALID {
		t.Fatalf("fare 0: %v", err)
	}
	if _, err := b.rides.Trip(ctx, "nope"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("unknown trip: %v", err)
	}
}

// TestInjectedFaults: with 30 % of the gateway replies lost after the call applied and
// 10 % of the participant calls failing first (fault.Saga), every trip
// still ends settled, each hold captured under one key and for its fare once; the lost
// replies were retried (replays at the gateway) and the failures logged as transient.
func TestInjectedFaults(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	gw := sim.New()
	e, err := engine.Open(t.Context(), engine.Config{
		DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"), Gateway: gw,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Wrap:   engine.Wrap{Participant: (&fault.Saga{FailRate: 0.1, TimeoutAfterApplyRate: 0.3}).Wrap},
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := &bundle{e: e, rides: e.Service(ride.FlowName).(*ride.Service), gw: gw}
	var ids []string
	for i := range 20 {
		tr := b.inTrip(t, "driver-f"+string(rune('a'+i)))
		if _, err := b.rides.EndTrip(t.Context(), tr.ID, 3820); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tr.ID)
	}
	transient := 0
	for _, id := range ids {
		tr := b.waitState(t, id, ride.StateSettled)
		h, _ := b.gw.Hold(t.Context(), tr.HoldID)
		checkHold(t, h, orderly.HoldPosted, 3820, 1180)
		if n := b.calls(sim.GatewayCaptureHold, tr.HoldID); n != 1 {
			t.Fatalf("trip %s: %d captures applied, want 1", id, n)
		}
		_, log, err := e.Sagas().Get(t.Context(), tr.PaymentSagaID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range log {
			if s.Outcome == saga.OutcomeTransient {
				transient++
			}
		}
	}
	replays := 0
	for _, c := range b.gw.Ledger() {
		if c.Op == sim.GatewayCaptureHold && c.Replay {
			replays++
		}
	}
	if replays == 0 || transient == 0 {
		t.Fatalf("%d capture replays, %d transient attempts: the faults did not reach the participants", replays, transient)
	}
}

// TestUnassignedTripClosesAtHoldExpiry: a trip no driver took closes (hold_expired) when its
// hold lapses — the flow's timed state on the closer's one timer, never before close_at —
// and its hold is released by the expiry alone: no capture, no void.
func TestUnassignedTripClosesAtHoldExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A gateway clock 2 h − 300 ms behind: the 2 h hold expires 300 ms from now.
	b.gw.SetClock(func() time.Time { return time.Now().Add(-ride.DefaultHoldTTL + 300*time.Millisecond) })
	tr, err := b.rides.CreateTrip(t.Context(), &orderly.CreateTripParams{RiderID: "r", Currency: "USD", Estimate: 4000})
	if err != nil {
		t.Fatal(err)
	}
	b.gw.SetClock(time.Now)
	got := b.waitState(t, tr.ID, orderly.StateClosed)
	if got.CloseReason != string(ride.CloseReasonHoldExpired) {
		t.Fatalf("close reason %q, want hold_expired", got.CloseReason)
	}
	o, err := b.e.Orders().Order(t.Context(), tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.ClosedAt == nil || o.ClosedAt.Before(o.CloseAt) || !o.CloseAt.Equal(tr.HoldExpiresAt) {
		t.Fatalf("closed at %v, close_at %s, hold expiry %s: want closed at or after close_at = the hold's expiry", o.ClosedAt, o.CloseAt, tr.HoldExpiresAt)
	}
	h, _ := b.gw.Hold(t.Context(), tr.HoldID)
	checkHold(t, h, orderly.HoldExpired, 0, 5000)
	if n, v := b.calls(sim.GatewayCaptureHold, tr.HoldID), b.calls(sim.GatewayVoidHold, tr.HoldID); n+v != 0 {
		t.Fatalf("%d captures and %d voids of an expired hold, want none", n, v)
	}
	if _, err := b.rides.AssignDriver(t.Context(), tr.ID, "late-driver"); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("assign after the close: %v, want EILLEGAL", err)
	}
}

// TestSagaCommitsWithItsMove: a process that dies the moment a trip's move commits (end,
// then refund) leaves a trip whose saga exists, and the timer runs it to its end once the
// attempt's lease ends. Before, the move and the saga's start were two transactions: a
// kill between them left the trip in refunding (or trip_ended) with no saga, for ever.
func TestSagaCommitsWithItsMove(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tr := b.inTrip(t, "driver-die")
	ended, err := b.rides.EndAndDie(ctx, tr.ID, 3820)
	if err != nil {
		t.Fatal(err)
	}
	if ended.State != ride.StateTripEnded || ended.PaymentSagaID == "" {
		t.Fatalf("ended trip %s with payment saga %q, want trip_ended with one", ended.State, ended.PaymentSagaID)
	}
	inst, _, err := b.e.Sagas().Get(ctx, ended.PaymentSagaID)
	if err != nil || inst.State != saga.StateRunning {
		t.Fatalf("payment saga of a trip that just ended: %+v (%v), want running", inst, err)
	}
	if got := b.waitState(t, tr.ID, ride.StateSettled); got.Captured != 3820 || got.Released != 1180 {
		t.Fatalf("settled by the timer with captured %d, released %d, want 3820 and 1180", got.Captured, got.Released)
	}
	refunding, err := b.rides.RefundAndDie(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if inst, _, err = b.e.Sagas().Get(ctx, refunding.RefundSagaID); err != nil || inst.State != saga.StateRunning {
		t.Fatalf("refund saga of a trip that just moved to refunding: %+v (%v), want running", inst, err)
	}
	if got := b.waitState(t, tr.ID, ride.StateRefunded); got.Refunded != 3820 {
		t.Fatalf("refunded by the timer: %d, want 3820", got.Refunded)
	}
	if d := b.balance(t, "driver-die"); d != 0 {
		t.Fatalf("driver balance after the refund %d, want 0", d)
	}
}

// TestUncaptureFlagsCollection: compensating the capture (a later step failed, or the
// capture's outcome stayed unknown past its deadline) voids the hold and flags the trip,
// which paid nothing, for collection of its fare, once however often it runs. Before, the
// trip stayed trip_ended, unpaid and unflagged.
func TestUncaptureFlagsCollection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tr := b.inTrip(t, "driver-free-ride")
	ended, err := b.rides.EndAndDie(ctx, tr.ID, 3820)
	if err != nil {
		t.Fatal(err)
	}
	call := &saga.Call{SagaID: ended.PaymentSagaID, Definition: ride.DefinitionPayment, StepName: "capture",
		Phase: saga.PhaseCompensation, Attempt: 1, Input: []byte(`{"trip_id":"` + tr.ID + `","kind":"fare","amount":3820}`),
		IdempotencyKey: saga.IdempotencyKey(ended.PaymentSagaID, "capture", saga.PhaseCompensation)}
	for range 2 { // a compensation is retried until it succeeds: twice changes nothing more
		if err := b.rides.Uncapture(ctx, call); err != nil {
			t.Fatal(err)
		}
	}
	got, err := b.rides.Trip(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ride.StateTripEnded || got.CollectionDue != 3820 || got.Captured != 0 {
		t.Fatalf("after the capture's compensation: %s, collection_due %d, captured %d; want trip_ended, 3820, 0",
			got.State, got.CollectionDue, got.Captured)
	}
	if h, err := b.gw.Hold(ctx, tr.HoldID); err != nil || h.State != orderly.HoldVoided || h.Captured != 0 {
		t.Fatalf("hold after the compensation %+v (%v), want voided, nothing captured", h, err)
	}
}

// TestRefundAgainAfterAFailedRefund: a refund that the driver's wallet cannot cover puts
// the trip back in settled (the refund saga compensated); once the wallet holds the
// payout again, a second refund is a saga of its own (new id, new keys) and refunds the
// card once. Before, the second refund reused the first saga's id: it was refused (or,
// when the saga was started in a transaction of its own, left the trip in refunding).
func TestRefundAgainAfterAFailedRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tr := b.inTrip(t, "driver-spent")
	if _, err := b.rides.EndTrip(ctx, tr.ID, 3820); err != nil {
		t.Fatal(err)
	}
	settled := b.waitState(t, tr.ID, ride.StateSettled)
	payout := b.balance(t, "driver-spent")
	if payout != settled.DriverPayout || payout == 0 {
		t.Fatalf("driver balance %d, payout %d", payout, settled.DriverPayout)
	}
	driver := ride.DriverAccount("driver-spent", "USD")
	spend := &orderly.WalletMoveParams{Account: &driver, Currency: "USD", Amount: payout, IdempotencyKey: "spent"}
	if _, err := b.e.Wallets().Debit(ctx, spend); err != nil {
		t.Fatal(err)
	}
	first, err := b.rides.RefundTrip(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if first.State != ride.StateSettled || first.Refunded != 0 || first.RefundSagaID != tr.ID+":refund" {
		t.Fatalf("refund the wallet cannot cover: %s, refunded %d, saga %s; want settled, 0, %s:refund",
			first.State, first.Refunded, first.RefundSagaID, tr.ID)
	}
	if _, err := b.e.Wallets().Credit(ctx, &orderly.WalletMoveParams{Account: &driver, Currency: "USD", Amount: payout,
		IdempotencyKey: "earned-back"}); err != nil {
		t.Fatal(err)
	}
	second, err := b.rides.RefundTrip(ctx, tr.ID)
	if err != nil {
		t.Fatal(err)
	}
	if second.State != ride.StateRefunded || second.Refunded != 3820 || second.RefundSagaID != tr.ID+":refund:2" {
		t.Fatalf("second refund: %s, refunded %d, saga %s; want refunded, 3820, %s:refund:2",
			second.State, second.Refunded, second.RefundSagaID, tr.ID)
	}
	if h, err := b.gw.Hold(ctx, tr.HoldID); err != nil || h.Refunded != 3820 {
		t.Fatalf("card refunded %+v (%v), want 3820 once", h, err)
	}
	// The card refund's key is the trip's, not the try's: a first try whose refund step's
	// outcome stayed unknown may have refunded, and the next is answered that refund.
	keys, err := b.gw.HoldKeys(ctx, tr.HoldID)
	var refundKeys []string
	for _, k := range keys {
		if k.Op == string(sim.GatewayRefund) {
			refundKeys = append(refundKeys, k.Key)
		}
	}
	if err != nil || len(refundKeys) != 1 || refundKeys[0] != tr.ID+":refund/refund/action" {
		t.Fatalf("refund keys of the hold %v (%v), want one: %s:refund/refund/action", refundKeys, err, tr.ID)
	}
	if d := b.balance(t, "driver-spent"); d != 0 {
		t.Fatalf("driver balance after the refund %d, want 0", d)
	}
}
