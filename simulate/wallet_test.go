package simulate

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/internal/fault"
	"github.com/orderlyhq/orderly/internal/testenv"
	"github.com/orderlyhq/orderly/store"
)

// TestWalletFlow runs --flow wallet against the real engine with 10 % of the saga's
// participant calls failing, 10 % slow and 10 % timing out after they applied. Clean: no
// violation, the counts reconcile (every checkout's saga ended, paid ones debited once:
// the money debited is the paid orders' amounts). Broken: a stray debit of one buyer's
// wallet, not backed by any paid order, made while the run settles, is reported as a
// money violation of that wallet.
func TestWalletFlow(t *testing.T) {
	testenv.Long(t)
	if testing.Short() {
		t.Skip("two simulations of a whole engine; skipped with -short")
	}
	t.Parallel()
	for _, broken := range []bool{false, true} {
		name := "clean"
		if broken {
			name = "stray debit"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := enginetest.Serve(t, enginetest.ServerOptions{CallbackSecret: mutantSecret,
				WrapParticipant: (&fault.Saga{FailRate: 0.1, SlowRate: 0.1, TimeoutAfterApplyRate: 0.1}).Wrap})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var strayUser string
			res, err := Run(ctx, Config{
				Target: srv.URL, CallbackSecret: mutantSecret, Orders: 120, Rate: 60, Seed: 5, Flows: []string{flowWallet},
				Drain: 20 * time.Second, Store: srv.Store,
				OnPhase: func(p string) {
					if p != PhaseSettle || !broken {
						return
					}
					strayUser = strayDebit(t, srv)
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			w := res.Wallet
			if w == nil || w.Checkouts != 120 || w.Sagas["succeeded"] != w.Paid || w.Sagas["succeeded"]+w.Sagas["compensated"] != 120 ||
				w.Paid == 0 || w.Refused[orderly.EINSUFFICIENT] == 0 || res.Sent != res.Created+res.Errors+sum(res.Rejected) {
				t.Fatalf("result %+v, wallet %+v", res, w)
			}
			if !broken {
				if !res.OK() {
					t.Fatalf("violations:\n%s", strings.Join(res.Violations, "\n"))
				}
				return
			}
			want := "I4 money: wallet of " + strayUser + ":"
			if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.HasPrefix(v, want) }) {
				t.Errorf("no violation starts %q; got:\n%s", want, strings.Join(res.Violations, "\n"))
			}
		})
	}
}

// strayDebit takes 100 from the first user wallet holding at least that much and
// returns its owner.
func strayDebit(t *testing.T, srv *enginetest.Server) string {
	var owner string
	err := srv.Store.Read(context.Background(), func(tx store.Tx) error {
		list, err := tx.WalletAccountList(context.Background(), &store.WalletAccountListParams{Limit: 500})
		for _, a := range list {
			if a.Kind == orderly.AccountUser && a.Available >= 100 {
				owner = a.Owner
				break
			}
		}
		return err
	})
	if err != nil || owner == "" {
		t.Errorf("no wallet to debit: %v", err)
		return ""
	}
	if _, err := srv.Engine.Wallets().Debit(context.Background(), &orderly.WalletMoveParams{UserID: owner, Currency: currency,
		Amount: 100, IdempotencyKey: "stray"}); err != nil {
		t.Error(err)
	}
	return owner
}
