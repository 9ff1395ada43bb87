package wallet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Debit is one debit of DebitSetTx: ps's user pays the platform.
type Debit struct {
	// ID is the transfer's id, chosen by the caller (a valid id: order.NewID).
	ID     string
	Params *orderly.WalletMoveParams // Counterparty must be nil: the platform
}

// DebitSetTx is DebitTx of many debits to the platform, in the caller's transaction tx at
// now, as one set: the accounts of every user and platform shard involved are locked in
// account id order (the ledger's lock order) and read in one statement, each debit in turn
// is taken when its user's available balance, less the debits before it in the set,
// covers it, and the transfers, the account moves and the entries are written in a few
// multi-row statements. Each debit's key must be new (no replay is looked up: a taken key
// is the set's error, ECONFLICT, and the caller then debits one by one with DebitTx). It
// returns, per debit, the transfer or the error: EINVALID for bad params, ENOTFOUND when
// the user has no account in the currency, EINSUFFICIENT when the balance is short;
// nothing is written for a debit with an error. Its own error is the database's: tx must
// then roll back.
func (s *Service) DebitSetTx(ctx context.Context, tx store.Tx, debits []Debit, now time.Time) ([]*orderly.WalletTransfer, []error, error) {
	trs, errs := make([]*orderly.WalletTransfer, len(debits)), make([]error, len(debits))
	var (
		ids       []string
		platforms = map[string]orderly.AccountRef{} // the shards, by id
	)
	for i, d := range debits {
		p := d.Params
		if err := validateMove(p); err != nil {
			errs[i] = err
			continue
		} else if p.Counterparty != nil {
			errs[i] = orderly.Errorf(orderly.EINVALID, "counterparty: a debit of a set pays the platform")
			continue
		}
		user := orderly.UserAccount(p.UserID, p.Currency)
		cp := platformShard(orderly.SystemAccount(orderly.SystemPlatform, p.Currency), p.IdempotencyKey)
		trs[i] = &orderly.WalletTransfer{ID: d.ID, Kind: orderly.TransferDebit, IdempotencyKey: p.IdempotencyKey, AccountID: user.ID(),
			CounterpartyID: cp.ID(), Currency: p.Currency, Amount: p.Amount, CreatedAt: now}
		ids, platforms[cp.ID()] = append(ids, user.ID(), cp.ID()), cp
	}
	accounts, err := tx.WalletAccountsLock(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*orderly.WalletAccount, len(accounts))
	for _, a := range accounts {
		byID[a.ID] = a
	}
	delta, count := map[string]int64{}, map[string]int64{}
	var (
		taken   []*orderly.WalletTransfer
		entries []*orderly.WalletEntry
	)
	for i, tr := range trs {
		if tr == nil {
			continue
		}
		a := byID[tr.AccountID]
		switch {
		case a == nil:
			trs[i], errs[i] = nil, orderly.Errorf(orderly.ENOTFOUND, "wallet account %s", tr.AccountID)
			continue
		case a.Available+delta[tr.AccountID] < tr.Amount:
			trs[i], errs[i] = nil, orderly.Errorf(orderly.EINSUFFICIENT, "account %s has %d available; this %s needs %d",
				tr.AccountID, a.Available+delta[tr.AccountID], tr.Kind, tr.Amount)
			continue
		}
		delta[tr.AccountID] -= tr.Amount
		delta[tr.CounterpartyID] += tr.Amount
		count[tr.AccountID]++
		count[tr.CounterpartyID]++
		taken = append(taken, tr)
		entries = append(entries,
			&orderly.WalletEntry{TransferID: tr.ID, AccountID: tr.AccountID, Bucket: orderly.BucketAvailable, Amount: -tr.Amount, CreatedAt: now},
			&orderly.WalletEntry{TransferID: tr.ID, AccountID: tr.CounterpartyID, Bucket: orderly.BucketAvailable, Amount: tr.Amount, CreatedAt: now})
	}
	if len(taken) == 0 {
		return trs, errs, nil
	}
	if err := tx.WalletTransfersInsertMany(ctx, taken); err != nil {
		return nil, nil, err
	}
	moves := make([]*store.WalletAccountMoveParams, 0, len(delta))
	for _, id := range slices.Sorted(maps.Keys(delta)) {
		if byID[id] == nil { // a platform shard's first payment (a user without an account took nothing)
			if err := tx.WalletAccountEnsure(ctx, platforms[id], now); err != nil {
				return nil, nil, err
			}
		}
		moves = append(moves, &store.WalletAccountMoveParams{ID: id, Available: delta[id], Now: now, Transfers: count[id]})
	}
	if n, err := tx.WalletAccountsMove(ctx, moves); err != nil {
		return nil, nil, err
	} else if n != int64(len(moves)) {
		return nil, nil, fmt.Errorf("debit %d transfers: %d of %d accounts moved (they were counted under their locks)", len(taken), n, len(moves))
	}
	if err := tx.WalletEntriesInsert(ctx, entries); err != nil {
		return nil, nil, err
	}
	return trs, errs, nil
}
