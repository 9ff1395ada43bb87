package sim_test

import (
	"context"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
)

// TestSimGatewayLedger: every call is in the ledger, in order; a refund moves money once
// per idempotency key, a replay is recorded as one, and a key reused for another amount is
// refused.
func TestSimGatewayLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g := sim.New()
	if _, err := g.Create(ctx, &orderly.Payment{ID: "p1", Amount: 900}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Query(ctx, &orderly.Payment{ID: "p1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Cancel(ctx, &orderly.Payment{ID: "p2"}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the outbox delivers at least once
		if _, err := g.Refund(ctx, &orderly.GatewayRefund{IdempotencyKey: "p1", PaymentID: "p1", Amount: 900}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RefundWithKey(ctx, "p1", "p1", 100); orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Fatalf("key reused for another amount: %v, want %s", err, orderly.ECONFLICT)
	}
	if err := g.RefundWithKey(ctx, "p1", "p1-second", 900); err != nil {
		t.Fatal(err)
	}
	type row struct {
		op     sim.GatewayOp
		id     string
		amount int64
		key    string
		replay bool
	}
	want := []row{
		{sim.GatewayCreate, "p1", 900, "", false},
		{sim.GatewayQuery, "p1", 0, "", false},
		{sim.GatewayCancel, "p2", 0, "", false},
		{sim.GatewayRefund, "p1", 900, "p1", false},
		{sim.GatewayRefund, "p1", 900, "p1", true},
		{sim.GatewayRefund, "p1", 100, "p1", true},
		{sim.GatewayRefund, "p1", 900, "p1-second", false},
	}
	got := g.Ledger()
	if len(got) != len(want) {
		t.Fatalf("ledger has %d calls, want %d: %+v", len(got), len(want), got)
	}
	for i, c := range got {
		if w := want[i]; (row{c.Op, c.PaymentID, c.Amount, c.IdempotencyKey, c.Replay}) != w || c.Seq != int64(i+1) || c.At.IsZero() {
			t.Errorf("call %d = %+v, want %+v with seq %d", i, c, w, i+1)
		}
	}
	if refunds := g.Refunds("p1"); len(refunds) != 2 || refunds[0].Seq != 4 || refunds[1].Seq != 7 {
		t.Errorf("refunds of p1 = %+v, want calls 4 and 7", refunds)
	}
	if got := g.Refunded("p1"); got != 1800 {
		t.Errorf("refunded %d, want 1800 (two keys)", got)
	}
	if got := g.Refunds("p2"); len(got) != 0 {
		t.Errorf("refunds of p2 = %+v, want none", got)
	}
}
