package ride_test

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/ride"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

// TestVerifyTrips: `verify` passes trips that followed the rules (a settled fare above the
// hold, a fee-paying cancellation, a refunded trip) and flags each corruption of one
// settled trip: held ≠ captured + released, payout + fee ≠ what was collected, a second
// capture key at the gateway (a double capture), what the gateway kept ≠ what the trip
// says, a cancelled trip that captured more than its fee.
func TestVerifyTrips(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	settled := b.inTrip(t, "driver-v1")
	if _, err := b.rides.EndTrip(ctx, settled.ID, 3820); err != nil {
		t.Fatal(err)
	}
	settled = b.waitState(t, settled.ID, ride.StateSettled)
	above := b.inTrip(t, "driver-v2")
	if _, err := b.rides.EndTrip(ctx, above.ID, 6100); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, above.ID, ride.StateSettled)
	refunded := b.inTrip(t, "driver-v3")
	if _, err := b.rides.EndTrip(ctx, refunded.ID, 2000); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, refunded.ID, ride.StateSettled)
	if _, err := b.rides.RefundTrip(ctx, refunded.ID); err != nil {
		t.Fatal(err)
	}
	cancelled := b.inTrip(t, "driver-v4")
	if cancelled, _ = b.rides.CancelTrip(ctx, cancelled.ID); cancelled.Captured != 500 {
		t.Fatalf("cancelled trip captured %d, want the fee 500", cancelled.Captured)
	}
	check := func() []string {
		t.Helper()
		rep, err := verify.Check(ctx, b.e.Store(), verify.Options{Flows: b.e.Flows(), Tolerance: time.Hour, Holds: sim.ReadHolds})
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
	if v := check(); len(v) != 0 {
		t.Fatalf("violations of trips that followed the rules: %v", v)
	}

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
	cases := []struct {
		name    string
		corrupt func()
		restore func()
		want    string
	}{
		{"released less", func() { edit(settled.ID, func(tr *orderly.Trip) { tr.Released-- }) },
			func() { edit(settled.ID, func(tr *orderly.Trip) { tr.Released++ }) }, "held 5000 ≠ captured 3820 + released 1179"},
		{"payout more", func() { edit(settled.ID, func(tr *orderly.Trip) { tr.DriverPayout++ }) },
			func() { edit(settled.ID, func(tr *orderly.Trip) { tr.DriverPayout-- }) }, "driver payout 3057 + platform fee 764 ≠ collected 3820"},
		{"trip says it captured less", func() { edit(settled.ID, func(tr *orderly.Trip) { tr.Captured, tr.Released = 3800, 1200 }) },
			func() { edit(settled.ID, func(tr *orderly.Trip) { tr.Captured, tr.Released = 3820, 1180 }) }, "kept 3820 (captured 3820, refunded 0), the trip says 3800"},
		{"cancellation captured more than its fee", func() { edit(cancelled.ID, func(tr *orderly.Trip) { tr.Captured, tr.Released = 600, 4400 }) },
			func() { edit(cancelled.ID, func(tr *orderly.Trip) { tr.Captured, tr.Released = 500, 4500 }) }, "cancelled with a fee of 500: captured 600"},
		{"double capture", func() {
			if err := b.e.Store().InTx(ctx, func(tx store.Tx) error {
				_, err := sqlstore.Exec(ctx, tx, "key again", `INSERT INTO sim_hold_keys (idempotency_key, hold_id, op, amount, created_at)
					VALUES (?, ?, ?, ?, ?)`, "again", settled.HoldID, "capture_hold", 3820, time.Now().UnixMilli())
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}, nil, "captured under 2 keys"},
	}
	for _, c := range cases {
		c.corrupt()
		v := check()
		found := false
		for _, x := range v {
			if !strings.Contains(x, settledOr(c.name, settled.ID, cancelled.ID)) {
				t.Errorf("%s: a violation about another trip: %q", c.name, x)
			}
			found = found || strings.Contains(x, c.want)
		}
		if !found {
			t.Errorf("%s: violations %q, want one about %q", c.name, v, c.want)
		}
		if c.restore != nil {
			c.restore()
		}
	}
}

// settledOr names the trip a corruption case touches.
func settledOr(name, settled, cancelled string) string {
	if strings.HasPrefix(name, "cancellation") {
		return cancelled
	}
	return settled
}
