package verify

import (
	"context"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// CheckWallets checks the wallet ledger (package wallet) in tx and returns its violations,
// each prefixed with its invariant, in a stable order:
//
//   - I4: every transfer has two or more entries summing to zero; every account's available
//     and held balances equal the sums of its entries per bucket; no user account's balance
//     and no account's held balance is negative; an account's held balance is the sum of
//     its pending holds' amounts.
//   - I3: a resolved hold (posted, voided, expired) was resolved by exactly one transfer, a
//     pending one by none; a posted hold captured 1 … its amount.
//
// Check runs it on every database; it reads every account, hold and the entries' sums in
// keyset pages. It returns an error only when the database cannot be read.
func CheckWallets(ctx context.Context, tx store.Tx) ([]string, error) {
	var out []string
	violate := func(inv, format string, args ...any) { out = append(out, inv+": "+fmt.Sprintf(format, args...)) }

	unbalanced, err := tx.WalletTransfersUnbalanced(ctx, DefaultMaxViolations)
	if err != nil {
		return nil, err
	}
	for _, id := range unbalanced {
		violate("I4", "wallet transfer %s: its entries do not sum to zero, or are fewer than two", id)
	}

	sums := map[string]*store.WalletEntrySum{}
	for after := ""; ; {
		page, err := tx.WalletEntrySums(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, err
		}
		for _, s := range page {
			sums[s.AccountID] = s
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].AccountID
	}

	pendingHeld := map[string]int64{}
	resolutions := map[string]int64{}
	for after := ""; ; {
		page, err := tx.WalletHoldResolutions(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, err
		}
		for _, r := range page {
			resolutions[r.HoldID] = r.Transfers
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].HoldID
	}
	for after := ""; ; {
		page, err := tx.WalletHoldList(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, err
		}
		for _, h := range page {
			n := resolutions[h.ID]
			switch {
			case h.State == orderly.HoldPending:
				pendingHeld[h.AccountID] += h.Amount
				if n != 0 {
					violate("I3", "wallet hold %s is pending but %d transfers resolved it", h.ID, n)
				}
			case n != 1:
				violate("I3", "wallet hold %s is %s, resolved by %d transfers, want 1", h.ID, h.State, n)
			}
			if (h.State == orderly.HoldPosted) != (h.Captured > 0) || h.Captured > h.Amount {
				violate("I3", "wallet hold %s is %s with %d captured of %d", h.ID, h.State, h.Captured, h.Amount)
			}
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}

	for after := ""; ; {
		page, err := tx.WalletAccountList(ctx, &store.WalletAccountListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, err
		}
		for _, a := range page {
			s := sums[a.ID]
			if s == nil {
				s = &store.WalletEntrySum{AccountID: a.ID}
			}
			delete(sums, a.ID)
			if a.Available != s.Available || a.Held != s.Held {
				violate("I4", "wallet account %s: available %d held %d, its entries sum to %d and %d",
					a.ID, a.Available, a.Held, s.Available, s.Held)
			}
			if a.Held < 0 || a.Kind != orderly.AccountSystem && a.Available < 0 {
				violate("I4", "wallet account %s is negative: available %d held %d", a.ID, a.Available, a.Held)
			}
			if a.Held != pendingHeld[a.ID] {
				violate("I4", "wallet account %s: held %d, its pending holds hold %d", a.ID, a.Held, pendingHeld[a.ID])
			}
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}
	for _, id := range sortedKeys(sums) {
		violate("I4", "wallet entries name account %s, which does not exist", id)
	}
	return out, nil
}
