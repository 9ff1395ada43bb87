package wallet

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/store"
)

// Expiries are the hold expiries as a timed kind of the close path (closer.Timed): the
// closer's one timer, sweep and deep check expire the pending holds whose expires_at
// passed on the database clock, releasing their amount to available, at or after the
// deadline and never before (the guarded UPDATE compares expires_at with the database's
// now). A hold resolves once: a post or void that got there first (or that found the hold
// expired and expired it itself) leaves nothing to do. Give it to closer.Config.Timed.
type Expiries struct {
	logger *slog.Logger
}

var _ closer.Timed = (*Expiries)(nil)

// NewExpiries returns the hold expiries; logger nil means slog.Default().
func NewExpiries(logger *slog.Logger) *Expiries {
	return &Expiries{logger: cmp.Or(logger, slog.Default())}
}

// Name implements closer.Timed.
func (e *Expiries) Name() string { return "wallet_hold" }

// NextWakeAt implements closer.Timed: the earliest expiry of a pending hold.
func (e *Expiries) NextWakeAt(ctx context.Context, tx store.Tx) (time.Time, bool, error) {
	return tx.WalletHoldNextWakeAt(ctx)
}

// OverdueCount implements closer.Timed.
func (e *Expiries) OverdueCount(ctx context.Context, tx store.Tx, before time.Time) (int64, error) {
	return tx.WalletHoldsOverdueCount(ctx, before)
}

// FireDue implements closer.Timed: it claims up to limit pending holds whose expires_at <=
// now (SKIP LOCKED) and expires them in tx, each releasing its amount in one transfer.
// Lock order: the claimed hold rows, then the account rows (store.WalletTx).
func (e *Expiries) FireDue(ctx context.Context, tx store.Tx, now time.Time, limit int, trigger string) (claimed, fired int, err error) {
	due, err := tx.WalletHoldsDue(ctx, now, limit)
	if err != nil {
		return 0, 0, err
	}
	for _, h := range due {
		ok, err := expire(ctx, tx, h, now)
		if err != nil {
			return len(due), fired, err
		}
		if ok {
			fired++
			e.logger.DebugContext(ctx, "wallet hold expired", "hold_id", h.ID, "account_id", h.AccountID, "amount", h.Amount,
				"lateness_ms", now.Sub(h.ExpiresAt).Milliseconds(), "trigger", trigger)
		}
	}
	return len(due), fired, nil
}
