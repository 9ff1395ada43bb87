package wallet

import (
	"context"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/store"
)

// Kinds of the wallet's reconciliation findings (docs/operations/reconcile.md).
const (
	// KindHoldOverdue: a hold still pending past its expiry by more than the reconciler's
	// overdue tolerance (the timer and the sweep should have expired it). Repaired by
	// expiring it as the timer would: its amount goes back to available, once.
	KindHoldOverdue reconcile.Kind = "wallet_hold_overdue"
	// KindLedgerMismatch: an account whose available or held balance differs from the sum
	// of its ledger entries, or a user account below zero. An operator task: which side is
	// wrong takes a person.
	KindLedgerMismatch reconcile.Kind = "wallet_ledger_mismatch"
	// KindTransferUnbalanced: a transfer whose entries do not sum to zero or are fewer than
	// two (a broken double entry). An operator task.
	KindTransferUnbalanced reconcile.Kind = "wallet_transfer_unbalanced"
)

// unbalancedLimit bounds the unbalanced transfers one run reports: each is an operator
// task, and more than this many says the ledger code is broken, not one transfer.
const unbalancedLimit = 1000

// ReconcileChecks returns the wallet's reconciliation checks, for reconcile.Config.Checks:
// overdue holds (repaired), accounts that disagree with their ledger and unbalanced
// transfers (operator tasks). They have no per-order form: holds and transfers name
// accounts, not orders.
func ReconcileChecks() []reconcile.Check {
	return []reconcile.Check{
		{Kind: KindHoldOverdue, Scan: scanHoldsOverdue, Repair: repairHoldOverdue},
		{Kind: KindLedgerMismatch, Scan: scanLedgers},
		{Kind: KindTransferUnbalanced, Scan: scanUnbalanced},
	}
}

func scanHoldsOverdue(ctx context.Context, r *reconcile.Reconciler, _ time.Time, emit func(*reconcile.Finding)) (int64, error) {
	return reconcile.Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		now, err := tx.Now(ctx)
		if err != nil {
			return 0, after, err
		}
		hs, err := tx.WalletHoldsOverdue(ctx, &store.WalletHoldsOverdueParams{Before: now.Add(-r.OverdueTolerance()),
			AfterID: after, Limit: limit})
		for _, h := range hs {
			emit(&reconcile.Finding{Kind: KindHoldOverdue, Target: h.ID,
				Detail: fmt.Sprintf("hold %s of account %s (%d %s) is pending %d ms past its expiry %s",
					h.ID, h.AccountID, h.Amount, h.Currency, now.Sub(h.ExpiresAt).Milliseconds(), stamp(h.ExpiresAt))})
			after = h.ID
		}
		return len(hs), after, err
	})
}

// repairHoldOverdue expires the hold under its row lock, as the timer does (expire: never
// before expires_at on the database clock); a hold resolved meanwhile changes nothing.
func repairHoldOverdue(ctx context.Context, r *reconcile.Reconciler, f *reconcile.Finding, by reconcile.Actor) (bool, error) {
	return r.RepairInTx(ctx, by, f, f.Target, func(tx store.Tx, now time.Time) (bool, any, error) {
		h, err := tx.WalletHoldLock(ctx, f.Target)
		if err != nil || h.State != orderly.HoldPending {
			return false, nil, err
		}
		ok, err := expire(ctx, tx, h, now)
		return ok, map[string]any{"hold_id": h.ID, "account_id": h.AccountID, "released": h.Amount,
			"expires_at": stamp(h.ExpiresAt)}, err
	})
}

func scanLedgers(ctx context.Context, r *reconcile.Reconciler, _ time.Time, emit func(*reconcile.Finding)) (int64, error) {
	return reconcile.Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		ls, err := tx.WalletLedgers(ctx, &store.ListParams{AfterID: after, Limit: limit})
		for _, l := range ls {
			a := l.Account
			switch {
			case !l.Agrees():
				emit(&reconcile.Finding{Kind: KindLedgerMismatch, Target: a.ID,
					Detail: fmt.Sprintf("account %s has available %d held %d %s; its entries sum to available %d held %d",
						a.ID, a.Available, a.Held, a.Currency, l.LedgerAvailable, l.LedgerHeld)})
			case a.Held < 0 || a.Kind != orderly.AccountSystem && a.Available < 0:
				emit(&reconcile.Finding{Kind: KindLedgerMismatch, Target: a.ID,
					Detail: fmt.Sprintf("%s account %s is below zero: available %d held %d %s", a.Kind, a.ID, a.Available, a.Held, a.Currency)})
			}
			after = a.ID
		}
		return len(ls), after, err
	})
}

func scanUnbalanced(ctx context.Context, r *reconcile.Reconciler, _ time.Time, emit func(*reconcile.Finding)) (int64, error) {
	var n int64
	err := r.Read(ctx, func(tx store.Tx) error {
		ids, err := tx.WalletTransfersUnbalanced(ctx, unbalancedLimit)
		for _, id := range ids {
			emit(&reconcile.Finding{Kind: KindTransferUnbalanced, Target: id,
				Detail: fmt.Sprintf("transfer %s: its entries do not sum to zero, or are fewer than two", id)})
		}
		n = int64(len(ids))
		return err
	})
	return n, err
}
