package wallet_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/wallet"
)

// TestPlatformSharded: 64 debits of 100 under distinct keys pay the platform over several
// of its shard accounts, never the unsharded "platform" row, each debit's counterparty is
// the shard it credited, a replay names the same shard, a refund takes the money back
// from it, and the shards sum to what was paid while every account agrees with its
// entries.
func TestPlatformSharded(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *bundle) {
		b.credit(t, "buyer", 10_000)
		var first *orderly.WalletTransfer
		for i := range 64 {
			tr, err := b.svc.Debit(t.Context(), &orderly.WalletMoveParams{UserID: "buyer", Currency: "USD", Amount: 100,
				IdempotencyKey: fmt.Sprintf("pay-%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(tr.CounterpartyID, "system:USD:platform#") {
				t.Fatalf("debit %d paid %s, want a platform shard", i, tr.CounterpartyID)
			}
			if i == 0 {
				first = tr
			}
		}
		again, err := b.svc.Debit(t.Context(), &orderly.WalletMoveParams{UserID: "buyer", Currency: "USD", Amount: 100, IdempotencyKey: "pay-0"})
		if err != nil || !again.Replay || again.ID != first.ID || again.CounterpartyID != first.CounterpartyID {
			t.Fatalf("replay: %+v %v, want transfer %s to %s", again, err, first.ID, first.CounterpartyID)
		}
		if _, err := b.svc.Refund(t.Context(), &orderly.WalletRefundParams{TransferID: first.ID, Amount: 100, IdempotencyKey: "refund-0"}); err != nil {
			t.Fatal(err)
		}
		used := 0
		err = b.db.Read(t.Context(), func(tx store.Tx) error {
			for i, id := range wallet.PlatformAccounts("USD") {
				a, err := tx.WalletAccountGet(t.Context(), id)
				if orderly.ErrorCode(err) == orderly.ENOTFOUND {
					continue
				} else if err != nil {
					return err
				}
				if i == 0 {
					return fmt.Errorf("the unsharded account %s was used (available %d)", id, a.Available)
				}
				used++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if used < 8 {
			t.Errorf("%d platform shards used by 64 debits, want them spread (≥ 8 of %d)", used, wallet.PlatformShards)
		}
		if p := b.platform(t); p != 6_300 {
			t.Errorf("platform: %d, want 6300 (64 debits of 100, one refunded)", p)
		}
		if av, _ := b.balance(t, "buyer"); av != 3_700 {
			t.Errorf("buyer: %d, want 3700", av)
		}
		b.checkLedger(t)
	})
}
