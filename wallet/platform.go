package wallet

import (
	"context"
	"hash/fnv"
	"strconv"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// PlatformShards is how many accounts hold the platform's side of payments in each
// currency. Every debit or capture credits the platform; were it one row, concurrent
// payments would queue on its lock (PostgreSQL, MySQL: from its UPDATE to the commit).
// The platform's money is instead spread over the system accounts "platform#0" …
// "platform#15" (ids "system:<currency>:platform#<n>"), the shard chosen by a hash of the
// operation's idempotency key; a refund takes the money back from the account its
// transfer paid. Each shard is an account of the ledger like any other (its balance
// equals its entries, verify and the reconciliation check it); the platform's balance is
// their sum with the unsharded "platform" account of earlier versions: PlatformBalance.
const PlatformShards = 16

// platformShard returns the shard of the platform account ref for the operation whose
// idempotency key is key; any other account as it is.
func platformShard(ref orderly.AccountRef, key string) orderly.AccountRef {
	if ref.Kind != orderly.AccountSystem || ref.Owner != orderly.SystemPlatform {
		return ref
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	ref.Owner = orderly.SystemPlatform + "#" + strconv.Itoa(int(h.Sum32()%PlatformShards))
	return ref
}

// PlatformAccounts returns the ids of the platform's accounts in currency: the unsharded
// "platform" account of earlier versions, then the PlatformShards shards.
func PlatformAccounts(currency string) []string {
	ids := make([]string, 0, PlatformShards+1)
	ids = append(ids, orderly.SystemAccount(orderly.SystemPlatform, currency).ID())
	for i := range PlatformShards {
		ids = append(ids, orderly.SystemAccount(orderly.SystemPlatform+"#"+strconv.Itoa(i), currency).ID())
	}
	return ids
}

// PlatformBalance returns the platform's balance in currency read in tx: the sums of the
// available and held balances of its accounts (PlatformAccounts; one that was never used
// counts 0), in minor units.
func PlatformBalance(ctx context.Context, tx store.Tx, currency string) (available, held int64, err error) {
	for _, id := range PlatformAccounts(currency) {
		a, err := tx.WalletAccountGet(ctx, id)
		if orderly.ErrorCode(err) == orderly.ENOTFOUND {
			continue
		} else if err != nil {
			return 0, 0, err
		}
		available += a.Available
		held += a.Held
	}
	return available, held, nil
}
