package wallet_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/wallet"
)

// noRefunds is the reconciler's Refunder in a store without orders: the wallet's checks
// never ask for a refund.
type noRefunds struct{ t *testing.T }

func (n noRefunds) RefundUnkept(context.Context, store.Tx, string, time.Time) (bool, error) {
	n.t.Error("a wallet check asked for a payment refund")
	return false, nil
}

// TestReconcileWallets injects each wallet finding kind — a hold left pending past its
// expiry (the timer never ran), an account whose balance was changed behind the ledger's
// back, a transfer of one entry — and runs the reconciliation with repair twice: the
// overdue hold is expired once (its amount back to available, audited), the two others
// are operator tasks found again by the second run.
func TestReconcileWallets(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *bundle) {
		ctx := t.Context()
		r, err := reconcile.New(reconcile.Config{Store: b.db, Machine: order.DefaultMachine(), Payments: noRefunds{t},
			Checks: wallet.ReconcileChecks(), OverdueTolerance: time.Millisecond, BatchSize: 2,
			Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []string{"ada", "bob", "cy"} { // three accounts (and the external one): pages are crossed
			b.credit(t, u, 1000)
		}
		h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "ada", Currency: "USD", Amount: 300, TTL: time.Second,
			IdempotencyKey: "ride-1"})
		if err != nil {
			t.Fatal(err)
		}
		clean, err := r.Run(ctx, reconcile.RunOptions{})
		if err != nil || len(clean.Findings) != 0 {
			t.Fatalf("before the expiry: findings %v, err %v", clean.Findings, err)
		}
		if b.setNow != nil {
			b.setNow(t0.Add(2 * time.Second))
		} else {
			time.Sleep(1100 * time.Millisecond)
		}
		bob := orderly.UserAccount("bob", "USD").ID()
		lone := "tr-lone-" + t.Name()
		err = b.db.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.WalletAccountMove(ctx, &store.WalletAccountMoveParams{ID: bob, Available: 7, Now: t0}); err != nil {
				return err
			}
			if err := tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: lone, Kind: orderly.TransferCredit,
				IdempotencyKey: lone, AccountID: orderly.UserAccount("cy", "USD").ID(), Currency: "USD", Amount: 1, CreatedAt: t0}); err != nil {
				return err
			}
			// One entry on cy and its balance moved with it: cy agrees with its ledger, the
			// transfer does not sum to zero.
			if _, err := tx.WalletAccountMove(ctx, &store.WalletAccountMoveParams{ID: orderly.UserAccount("cy", "USD").ID(),
				Available: 1, Now: t0}); err != nil {
				return err
			}
			return tx.WalletEntriesInsert(ctx, []*orderly.WalletEntry{{TransferID: lone,
				AccountID: orderly.UserAccount("cy", "USD").ID(), Bucket: orderly.BucketAvailable, Amount: 1, CreatedAt: t0}})
		})
		if err != nil {
			t.Fatal(err)
		}

		by := reconcile.Actor{Operator: "reconcile", TraceID: "trace-w"}
		rep, err := r.Run(ctx, reconcile.RunOptions{Repair: true, By: by})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			fmt.Sprintf("%s %s repaired=true", wallet.KindHoldOverdue, h.ID),
			fmt.Sprintf("%s %s repaired=false", wallet.KindLedgerMismatch, bob),
			fmt.Sprintf("%s %s repaired=false", wallet.KindTransferUnbalanced, lone),
		}
		if got := findings(rep); !slices.Equal(got, want) {
			t.Fatalf("findings:\n got %q\nwant %q", got, want)
		}
		if rep.Repaired != 1 {
			t.Errorf("report repaired %d, want 1", rep.Repaired)
		}
		if avail, held := b.balance(t, "ada"); avail != 1000 || held != 0 {
			t.Errorf("ada after the repair: available %d held %d, want 1000 and 0", avail, held)
		}
		got, err := b.svc.GetHold(ctx, h.ID)
		if err != nil || got.State != orderly.HoldExpired {
			t.Fatalf("hold after the repair: %+v, %v", got, err)
		}

		again, err := r.Run(ctx, reconcile.RunOptions{Repair: true, By: by})
		if err != nil {
			t.Fatal(err)
		}
		if got := findings(again); !slices.Equal(got, want[1:]) {
			t.Errorf("second run: got %q, want only the operator tasks %q", got, want[1:])
		}
		if avail, _ := b.balance(t, "ada"); avail != 1000 {
			t.Errorf("ada after the second run: available %d, want 1000 (released once)", avail)
		}
		var actions []*store.OperatorAction
		err = b.db.Read(ctx, func(tx store.Tx) (err error) {
			actions, err = tx.OperatorActionList(ctx, &store.OperatorActionListParams{Limit: 10})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(actions) != 1 || actions[0].Action != "repair:"+string(wallet.KindHoldOverdue) || actions[0].Target != h.ID ||
			actions[0].Operator != "reconcile" || actions[0].TraceID != "trace-w" {
			t.Errorf("audit: %+v, want one repair of hold %s by reconcile", actions, h.ID)
		}
	})
}

// findings renders "kind target repaired=…" per finding, sorted.
func findings(rep *reconcile.Report) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, fmt.Sprintf("%s %s repaired=%v", f.Kind, f.Target, f.Repaired))
	}
	slices.Sort(out)
	return out
}
