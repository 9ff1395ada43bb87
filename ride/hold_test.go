package ride_test

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/ride"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// eachDialect runs fn on a started engine over a fresh SQLite file, and over fresh
// PostgreSQL and MySQL/MariaDB databases when their variables are set.
func eachDialect(t *testing.T, fn func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := ""
			if dialect != "sqlite" {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			fn(t, setupURL(t, url))
		})
	}
}

// rideViolations returns verify's violations about trips (R).
func (b *bundle) rideViolations(t *testing.T) []string {
	t.Helper()
	rep, err := verify.Check(t.Context(), b.e.Store(), verify.Options{Flows: b.e.Flows(), Tolerance: time.Hour, Holds: sim.ReadHolds})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "R:") {
			out = append(out, v)
		}
	}
	return out
}

// unaccounted returns the trips reconcile finds with an unaccounted hold (repairing them
// when repair).
func (b *bundle) unaccounted(t *testing.T, repair bool) []*reconcile.Finding {
	t.Helper()
	rep, err := b.e.Reconciler().Run(t.Context(), reconcile.RunOptions{Repair: repair, By: reconcile.Actor{Operator: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*reconcile.Finding
	for _, f := range rep.Findings {
		if f.Kind == ride.KindTripHoldUnaccounted {
			out = append(out, f)
		}
	}
	return out
}

// expireGatewayHold moves the gateway's clock just past trip tr's hold expiry.
func (b *bundle) expireGatewayHold(t *testing.T, tr *orderly.Trip) {
	t.Helper()
	h, err := b.gw.Hold(t.Context(), tr.HoldID)
	if err != nil {
		t.Fatal(err)
	}
	b.gw.SetClock(func() time.Time { return h.ExpiresAt.Add(time.Millisecond) })
}

// TestEveryHoldEndsAccounted: whatever ends a trip, its hold of 5000 ends accounted on the
// trip, captured + released = held, and `verify` and reconcile agree: a fare within the
// hold or above it, a refund, a free and a fee-paying cancellation, the hold's expiry
// before any driver, a fare or a fee whose capture the expired hold refused, and a saga
// compensated after its capture (the extra charge refused). Before, the last four showed
// captured 0 and released 0 and `verify` passed them.
func TestEveryHoldEndsAccounted(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, b *bundle) {
		ctx := t.Context()
		type ending struct {
			name               string
			trip               *orderly.Trip
			state              orderly.State
			captured, released int64
		}
		var endings []ending
		add := func(name string, tr *orderly.Trip, state orderly.State, captured, released int64) {
			endings = append(endings, ending{name, tr, state, captured, released})
		}
		end := func(driver string, fare int64) *orderly.Trip {
			tr := b.inTrip(t, driver)
			if _, err := b.rides.EndTrip(ctx, tr.ID, fare); err != nil {
				t.Fatal(err)
			}
			return tr
		}
		add("fare within the hold", end("d-within", 3820), ride.StateSettled, 3820, 1180)
		add("fare above the hold", end("d-above", 6100), ride.StateSettled, 5000, 0)
		refunded := end("d-refund", 2000)
		b.waitState(t, refunded.ID, ride.StateSettled)
		if _, err := b.rides.RefundTrip(ctx, refunded.ID); err != nil {
			t.Fatal(err)
		}
		add("refunded", refunded, ride.StateRefunded, 2000, 3000)
		free, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "r-free", Currency: "USD", Estimate: 4000})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.rides.CancelTrip(ctx, free.ID); err != nil {
			t.Fatal(err)
		}
		add("free cancellation", free, orderly.StateClosed, 0, 5000)
		fee := b.inTrip(t, "d-fee")
		if _, err := b.rides.CancelTrip(ctx, fee.ID); err != nil {
			t.Fatal(err)
		}
		add("cancellation fee", fee, orderly.StateClosed, 500, 4500)

		// The hold expires 300 ms after the request, no driver assigned: the closer closes it.
		b.gw.SetClock(func() time.Time { return time.Now().Add(-ride.DefaultHoldTTL + 300*time.Millisecond) })
		expired, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "r-expired", Currency: "USD", Estimate: 4000})
		b.gw.SetClock(time.Now)
		if err != nil {
			t.Fatal(err)
		}
		b.waitState(t, expired.ID, orderly.StateClosed)
		add("expired before a driver", expired, orderly.StateClosed, 0, 5000)

		late := b.inTrip(t, "d-late")
		b.expireGatewayHold(t, late)
		if _, err := b.rides.EndTrip(ctx, late.ID, 3820); err != nil {
			t.Fatal(err)
		}
		b.gw.SetClock(time.Now)
		add("ended after the hold's expiry", late, ride.StateTripEnded, 0, 5000)

		lateFee := b.inTrip(t, "d-late-fee")
		b.expireGatewayHold(t, lateFee)
		if _, err := b.rides.CancelTrip(ctx, lateFee.ID); err != nil {
			t.Fatal(err)
		}
		b.gw.SetClock(time.Now)
		add("fee refused by the expired hold", lateFee, orderly.StateClosed, 0, 5000)

		// The second payment's id is taken (another amount): the extra charge is refused, and
		// the compensation refunds the hold's capture.
		comp := b.inTrip(t, "d-comp")
		if _, err := b.gw.Authorize(ctx, comp.HoldID+"/extra", 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := b.rides.EndTrip(ctx, comp.ID, 6100); err != nil {
			t.Fatal(err)
		}
		add("compensated after its capture", comp, ride.StateTripEnded, 0, 5000)

		for _, e := range endings {
			got := b.waitState(t, e.trip.ID, e.state)
			if got.Captured != e.captured || got.Released != e.released || got.Captured+got.Released != got.HoldAmount {
				t.Errorf("%s: %s held %d, captured %d, released %d; want captured %d, released %d", e.name, got.State,
					got.HoldAmount, got.Captured, got.Released, e.captured, e.released)
			}
		}
		if _, _, err := b.e.Sagas().Get(ctx, comp.ID+":payment"); err != nil {
			t.Fatal(err)
		}
		if v := b.rideViolations(t); len(v) != 0 {
			t.Errorf("verify: %q, want none", v)
		}
		if f := b.unaccounted(t, false); len(f) != 0 {
			t.Errorf("reconcile: %d trips with an unaccounted hold (first %s), want none", len(f), f[0].Detail)
		}
	})
}

// TestUnaccountedHoldFlagged: a trip that ended without accounting its hold (an expired
// trip recorded before the release was: captured 0, released 0) is a `verify` violation
// and a reconcile finding, repaired once by recording the hold released; a paid trip
// whose figures disagree is found and left to an operator. Before, verify passed both
// (it checked held = captured + released only when something was recorded) and reconcile
// had no such kind.
func TestUnaccountedHoldFlagged(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, b *bundle) {
		ctx := t.Context()
		b.gw.SetClock(func() time.Time { return time.Now().Add(-ride.DefaultHoldTTL + 300*time.Millisecond) })
		expired, err := b.rides.CreateTrip(ctx, &orderly.CreateTripParams{RiderID: "r-expired", Currency: "USD", Estimate: 4000})
		b.gw.SetClock(time.Now)
		if err != nil {
			t.Fatal(err)
		}
		b.waitState(t, expired.ID, orderly.StateClosed)
		settled := b.inTrip(t, "d-settled")
		if _, err := b.rides.EndTrip(ctx, settled.ID, 3820); err != nil {
			t.Fatal(err)
		}
		b.waitState(t, settled.ID, ride.StateSettled)
		edit := func(id string, fn func(tr *orderly.Trip)) {
			t.Helper()
			if err := b.e.Store().InTx(ctx, func(tx store.Tx) error {
				tr, err := tx.TripGet(ctx, id)
				if err != nil {
					return err
				}
				fn(tr)
				_, err = tx.TripUpdate(ctx, tr)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
		edit(expired.ID, func(tr *orderly.Trip) { tr.Released = 0 })
		edit(settled.ID, func(tr *orderly.Trip) { tr.Captured, tr.Released = 0, 0 })

		v := b.rideViolations(t)
		for _, id := range []string{expired.ID, settled.ID} {
			if !strings.Contains(strings.Join(v, "\n"), "trip "+id+" ") {
				t.Errorf("verify: %q, want a violation about trip %s", v, id)
			}
		}
		found := b.unaccounted(t, true)
		if len(found) != 2 {
			t.Fatalf("reconcile found %d unaccounted holds, want 2: %+v", len(found), found)
		}
		for _, f := range found {
			if want := f.OrderID == expired.ID; f.Repaired != want {
				t.Errorf("finding about %s repaired %v, want %v (%s)", f.OrderID, f.Repaired, want, f.Detail)
			}
		}
		got, err := b.rides.Trip(ctx, expired.ID)
		if err != nil || got.Released != 5000 || got.Captured != 0 {
			t.Fatalf("expired trip after the repair: %+v (%v), want released 5000", got, err)
		}
		if again := b.unaccounted(t, true); len(again) != 1 || again[0].OrderID != settled.ID || again[0].Repaired {
			t.Fatalf("second reconcile: %+v, want only the settled trip, not repaired", again)
		}
	})
}
