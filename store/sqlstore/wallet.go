package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const walletAccountColumns = `id, kind, owner, currency, available, held, version, created_at, updated_at`

const walletTransferColumns = `id, kind, idempotency_key, account_id, counterparty_id, currency, amount, hold_id, refund_of,
	refunded, created_at`

const walletHoldColumns = `id, account_id, currency, amount, captured, state, expires_at, created_at, resolved_at`

var (
	qWalletAccountEnsure = newQuery(func(d *dialect) string {
		const insert = `INSERT INTO wallet_accounts (id, kind, owner, currency, available, held, version, created_at, updated_at)
			VALUES (?, ?, ?, ?, 0, 0, 1, ?, ?)`
		if d == mysqlDialect {
			return insert + ` ON DUPLICATE KEY UPDATE id = id`
		}
		return insert + ` ON CONFLICT (id) DO NOTHING`
	})
	qWalletAccountGet  = sqlText(`SELECT ` + walletAccountColumns + ` FROM wallet_accounts WHERE id = ?`)
	qWalletAccountList = sqlText(`SELECT ` + walletAccountColumns + ` FROM wallet_accounts
		WHERE (? = '' OR owner = ?) AND id > ? ORDER BY id LIMIT ?`)
	// qWalletAccountMove is the guard that keeps user balances at or above zero: one
	// UPDATE, no read-then-write (see store.WalletTx.WalletAccountMove).
	qWalletAccountMove = sqlText(`UPDATE wallet_accounts
		SET available = available + ?, held = held + ?, version = version + 1, updated_at = ?
		WHERE id = ? AND held + ? >= 0 AND (kind = 'system' OR available + ? >= 0)`)
	qWalletTransferInsert = sqlText(`INSERT INTO wallet_transfers (` + walletTransferColumns + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qWalletTransferGet         = sqlText(`SELECT ` + walletTransferColumns + ` FROM wallet_transfers WHERE id = ?`)
	qWalletTransferByKey       = sqlText(`SELECT ` + walletTransferColumns + ` FROM wallet_transfers WHERE idempotency_key = ?`)
	qWalletTransferAddRefunded = sqlText(`UPDATE wallet_transfers SET refunded = refunded + ?
		WHERE id = ? AND kind IN ('debit', 'post') AND refunded + ? >= 0 AND refunded + ? <= amount`)
	qWalletEntryInsert = sqlText(qWalletEntryHead + ` VALUES ` + qWalletEntryRow)
	qWalletEntryList   = sqlText(`SELECT e.id, e.transfer_id, t.kind, e.account_id, e.bucket, e.amount, e.created_at
		FROM wallet_entries e JOIN wallet_transfers t ON t.id = e.transfer_id
		WHERE e.account_id = ? AND e.id < ? ORDER BY e.id DESC LIMIT ?`)
	qWalletEntrySums = sqlText(`SELECT account_id,
		COALESCE(SUM(CASE WHEN bucket = 'available' THEN amount ELSE 0 END), 0),
		COALESCE(SUM(CASE WHEN bucket = 'held' THEN amount ELSE 0 END), 0)
		FROM wallet_entries WHERE account_id > ? GROUP BY account_id ORDER BY account_id LIMIT ?`)
	qWalletTransfersUnbalanced = sqlText(`SELECT t.id FROM wallet_transfers t LEFT JOIN wallet_entries e ON e.transfer_id = t.id
		GROUP BY t.id HAVING COUNT(e.id) < 2 OR COALESCE(SUM(e.amount), 0) <> 0 ORDER BY t.id LIMIT ?`)
	qWalletHoldInsert = sqlText(`INSERT INTO wallet_holds (` + walletHoldColumns + `, wake_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qWalletHoldGet  = sqlText(`SELECT ` + walletHoldColumns + ` FROM wallet_holds WHERE id = ?`)
	qWalletHoldLock = newQuery(func(d *dialect) string {
		return `SELECT ` + walletHoldColumns + ` FROM wallet_holds WHERE id = ?` + d.lockRows
	})
	qWalletHoldResolve = sqlText(`UPDATE wallet_holds SET state = ?, captured = ?, resolved_at = ?, wake_at = NULL
		WHERE id = ? AND state = 'pending' AND expires_at <= ?`)
	qWalletHoldsDue = newQuery(func(d *dialect) string {
		return `SELECT ` + walletHoldColumns + ` FROM wallet_holds` + d.forceIndex("wallet_holds_wake_at") + `
			WHERE wake_at <= ? ORDER BY wake_at LIMIT ?` + d.skipLocked
	})
	qWalletHoldNextWakeAt    = sqlText(`SELECT MIN(wake_at) FROM wallet_holds WHERE wake_at IS NOT NULL`)
	qWalletHoldsOverdueCount = sqlText(`SELECT COUNT(*) FROM wallet_holds WHERE wake_at < ?`)
	qWalletHoldsOverdue      = sqlText(`SELECT ` + walletHoldColumns + ` FROM wallet_holds
		WHERE wake_at IS NOT NULL AND wake_at < ? AND id > ? ORDER BY id LIMIT ?`)
	qWalletHoldResolutions = sqlText(`SELECT hold_id, COUNT(*) FROM wallet_transfers
		WHERE hold_id > ? AND kind IN ('post', 'void', 'expire') GROUP BY hold_id ORDER BY hold_id LIMIT ?`)
	qWalletHoldList = sqlText(`SELECT ` + walletHoldColumns + ` FROM wallet_holds WHERE id > ? ORDER BY id LIMIT ?`)
	// qWalletLedgers sums each account's entries through wallet_entries_account (account_id,
	// id): one index range per account of the page.
	qWalletLedgers = sqlText(`SELECT ` + walletAccountColumns + `,
		COALESCE((SELECT SUM(e.amount) FROM wallet_entries e WHERE e.account_id = wallet_accounts.id AND e.bucket = 'available'), 0),
		COALESCE((SELECT SUM(e.amount) FROM wallet_entries e WHERE e.account_id = wallet_accounts.id AND e.bucket = 'held'), 0)
		FROM wallet_accounts WHERE id > ? ORDER BY id LIMIT ?`)
)

// WalletAccountEnsure implements store.Tx.
func (t *tx) WalletAccountEnsure(ctx context.Context, ref orderly.AccountRef, now time.Time) error {
	_, err := t.exec(ctx, "wallet account "+ref.ID(), qWalletAccountEnsure, ref.ID(), ref.Kind, ref.Owner, ref.Currency, ms(now), ms(now))
	return err
}

func scanWalletAccount(r rowScanner) (*orderly.WalletAccount, error) {
	var (
		a                  orderly.WalletAccount
		created, updatedAt int64
	)
	if err := r.Scan(&a.ID, &a.Kind, &a.Owner, &a.Currency, &a.Available, &a.Held, &a.Version, &created, &updatedAt); err != nil {
		return nil, err
	}
	a.CreatedAt, a.UpdatedAt = fromMS(created), fromMS(updatedAt)
	return &a, nil
}

// WalletAccountGet implements store.Tx.
func (t *tx) WalletAccountGet(ctx context.Context, id string) (*orderly.WalletAccount, error) {
	a, err := scanWalletAccount(t.queryRow(ctx, qWalletAccountGet, id))
	return a, translate(err, "wallet account "+id)
}

// WalletAccountList implements store.Tx.
func (t *tx) WalletAccountList(ctx context.Context, p *store.WalletAccountListParams) ([]*orderly.WalletAccount, error) {
	return scanAll(t, ctx, "list wallet accounts", scanWalletAccount, qWalletAccountList, p.Owner, p.Owner, p.AfterID, p.Limit)
}

// WalletAccountMove implements store.Tx.
func (t *tx) WalletAccountMove(ctx context.Context, p *store.WalletAccountMoveParams) (bool, error) {
	n, err := t.exec(ctx, "move wallet account "+p.ID, qWalletAccountMove, p.Available, p.Held, ms(p.Now), p.ID, p.Held, p.Available)
	return n == 1, err
}

// WalletTransferInsert implements store.Tx.
func (t *tx) WalletTransferInsert(ctx context.Context, tr *orderly.WalletTransfer) error {
	_, err := t.exec(ctx, "wallet transfer "+tr.ID, qWalletTransferInsert, tr.ID, tr.Kind, nullString(tr.IdempotencyKey), tr.AccountID,
		nullString(tr.CounterpartyID), tr.Currency, tr.Amount, nullString(tr.HoldID), nullString(tr.RefundOf), tr.Refunded, ms(tr.CreatedAt))
	return err
}

func scanWalletTransfer(r rowScanner) (*orderly.WalletTransfer, error) {
	var (
		tr                                orderly.WalletTransfer
		key, counterparty, hold, refundOf sql.NullString
		created                           int64
	)
	if err := r.Scan(&tr.ID, &tr.Kind, &key, &tr.AccountID, &counterparty, &tr.Currency, &tr.Amount, &hold, &refundOf,
		&tr.Refunded, &created); err != nil {
		return nil, err
	}
	tr.IdempotencyKey, tr.CounterpartyID, tr.HoldID, tr.RefundOf = key.String, counterparty.String, hold.String, refundOf.String
	tr.CreatedAt = fromMS(created)
	return &tr, nil
}

// WalletTransferGet implements store.Tx.
func (t *tx) WalletTransferGet(ctx context.Context, id string) (*orderly.WalletTransfer, error) {
	tr, err := scanWalletTransfer(t.queryRow(ctx, qWalletTransferGet, id))
	return tr, translate(err, "wallet transfer "+id)
}

// WalletTransferByKey implements store.Tx.
func (t *tx) WalletTransferByKey(ctx context.Context, key string) (*orderly.WalletTransfer, error) {
	tr, err := scanWalletTransfer(t.queryRow(ctx, qWalletTransferByKey, key))
	return tr, translate(err, "wallet transfer with idempotency key "+key)
}

// WalletTransferAddRefunded implements store.Tx.
func (t *tx) WalletTransferAddRefunded(ctx context.Context, id string, amount int64) (bool, error) {
	n, err := t.exec(ctx, "refund wallet transfer "+id, qWalletTransferAddRefunded, amount, id, amount, amount)
	return n == 1, err
}

// WalletEntriesInsert implements store.Tx.
// A transfer's entries (two or more) are one statement (insertMany).
func (t *tx) WalletEntriesInsert(ctx context.Context, entries []*orderly.WalletEntry) error {
	switch len(entries) {
	case 0:
		return nil
	case 1:
		e := entries[0]
		_, err := t.exec(ctx, "wallet entry of "+e.TransferID, qWalletEntryInsert, e.TransferID, e.AccountID, e.Bucket, e.Amount, ms(e.CreatedAt))
		return err
	}
	args := make([]any, 0, 5*len(entries))
	for _, e := range entries {
		args = append(args, e.TransferID, e.AccountID, e.Bucket, e.Amount, ms(e.CreatedAt))
	}
	return t.insertMany(ctx, fmt.Sprintf("%d wallet entries of %s", len(entries), entries[0].TransferID), qWalletEntryHead, qWalletEntryRow, args)
}

// The wallet entry insert's parts: insertMany writes several rows in one statement.
const (
	qWalletEntryHead = `INSERT INTO wallet_entries (transfer_id, account_id, bucket, amount, created_at)`
	qWalletEntryRow  = `(?, ?, ?, ?, ?)`
)

func scanWalletEntry(r rowScanner) (*orderly.WalletEntry, error) {
	var (
		e       orderly.WalletEntry
		created int64
	)
	if err := r.Scan(&e.ID, &e.TransferID, &e.Kind, &e.AccountID, &e.Bucket, &e.Amount, &created); err != nil {
		return nil, err
	}
	e.CreatedAt = fromMS(created)
	return &e, nil
}

// WalletEntryList implements store.Tx.
func (t *tx) WalletEntryList(ctx context.Context, p *store.WalletEntryListParams) ([]*orderly.WalletEntry, error) {
	before := p.BeforeID
	if before <= 0 {
		before = math.MaxInt64
	}
	return scanAll(t, ctx, "list wallet entries", scanWalletEntry, qWalletEntryList, p.AccountID, before, p.Limit)
}

// WalletEntrySums implements store.Tx.
func (t *tx) WalletEntrySums(ctx context.Context, p *store.ListParams) ([]*store.WalletEntrySum, error) {
	return scanAll(t, ctx, "sum wallet entries", func(r rowScanner) (*store.WalletEntrySum, error) {
		var s store.WalletEntrySum
		return &s, r.Scan(&s.AccountID, &s.Available, &s.Held)
	}, qWalletEntrySums, p.AfterID, p.Limit)
}

// WalletTransfersUnbalanced implements store.Tx.
func (t *tx) WalletTransfersUnbalanced(ctx context.Context, limit int) ([]string, error) {
	ids, err := t.strings(ctx, qWalletTransfersUnbalanced, limit)
	if err != nil {
		return nil, fmt.Errorf("unbalanced wallet transfers: %w", err)
	}
	return ids, nil
}

// WalletHoldInsert implements store.Tx.
func (t *tx) WalletHoldInsert(ctx context.Context, h *orderly.WalletHold) error {
	_, err := t.exec(ctx, "wallet hold "+h.ID, qWalletHoldInsert, h.ID, h.AccountID, h.Currency, h.Amount, 0, orderly.HoldPending,
		ms(h.ExpiresAt), ms(h.CreatedAt), nil, ms(h.ExpiresAt))
	return err
}

func scanWalletHold(r rowScanner) (*orderly.WalletHold, error) {
	var (
		h                orderly.WalletHold
		expires, created int64
		resolved         sql.NullInt64
	)
	if err := r.Scan(&h.ID, &h.AccountID, &h.Currency, &h.Amount, &h.Captured, &h.State, &expires, &created, &resolved); err != nil {
		return nil, err
	}
	h.ExpiresAt, h.CreatedAt, h.ResolvedAt = fromMS(expires), fromMS(created), timePtr(resolved)
	return &h, nil
}

// WalletHoldGet implements store.Tx.
func (t *tx) WalletHoldGet(ctx context.Context, id string) (*orderly.WalletHold, error) {
	h, err := scanWalletHold(t.queryRow(ctx, qWalletHoldGet, id))
	return h, translate(err, "wallet hold "+id)
}

// WalletHoldLock implements store.Tx.
func (t *tx) WalletHoldLock(ctx context.Context, id string) (*orderly.WalletHold, error) {
	h, err := scanWalletHold(t.queryRow(ctx, qWalletHoldLock, id))
	return h, translate(err, "wallet hold "+id)
}

// WalletHoldResolve implements store.Tx.
func (t *tx) WalletHoldResolve(ctx context.Context, p *store.WalletHoldResolveParams) (bool, error) {
	var by int64 = math.MaxInt64 // no expiry guard
	if p.ExpiredBy != nil {
		by = ms(*p.ExpiredBy)
	}
	n, err := t.exec(ctx, "resolve wallet hold "+p.ID, qWalletHoldResolve, p.To, p.Captured, ms(p.At), p.ID, by)
	return n == 1, err
}

// WalletHoldsDue implements store.Tx.
func (t *tx) WalletHoldsDue(ctx context.Context, now time.Time, limit int) ([]*orderly.WalletHold, error) {
	return scanAll(t, ctx, "claim due wallet holds", scanWalletHold, qWalletHoldsDue, ms(now), limit)
}

// WalletHoldNextWakeAt implements store.Tx.
func (t *tx) WalletHoldNextWakeAt(ctx context.Context) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := t.queryRow(ctx, qWalletHoldNextWakeAt).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("next wallet hold wake_at: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(v.Int64), true, nil
}

// WalletHoldsOverdue implements store.Tx.
func (t *tx) WalletHoldsOverdue(ctx context.Context, p *store.WalletHoldsOverdueParams) ([]*orderly.WalletHold, error) {
	return scanAll(t, ctx, "overdue wallet holds", scanWalletHold, qWalletHoldsOverdue, ms(p.Before), p.AfterID, p.Limit)
}

// WalletHoldsOverdueCount implements store.Tx.
func (t *tx) WalletHoldsOverdueCount(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := t.queryRow(ctx, qWalletHoldsOverdueCount, ms(before)).Scan(&n)
	return n, translate(err, "overdue wallet holds")
}

// WalletHoldList implements store.Tx.
func (t *tx) WalletHoldList(ctx context.Context, p *store.ListParams) ([]*orderly.WalletHold, error) {
	return scanAll(t, ctx, "list wallet holds", scanWalletHold, qWalletHoldList, p.AfterID, p.Limit)
}

// WalletHoldResolutions implements store.Tx.
func (t *tx) WalletHoldResolutions(ctx context.Context, p *store.ListParams) ([]*store.WalletHoldResolutions, error) {
	return scanAll(t, ctx, "count wallet hold resolutions", func(r rowScanner) (*store.WalletHoldResolutions, error) {
		var n store.WalletHoldResolutions
		return &n, r.Scan(&n.HoldID, &n.Transfers)
	}, qWalletHoldResolutions, p.AfterID, p.Limit)
}

// WalletLedgers implements store.Tx.
func (t *tx) WalletLedgers(ctx context.Context, p *store.ListParams) ([]*store.WalletLedger, error) {
	return scanAll(t, ctx, "wallet ledgers", func(r rowScanner) (*store.WalletLedger, error) {
		var (
			l                  store.WalletLedger
			a                  orderly.WalletAccount
			created, updatedAt int64
		)
		if err := r.Scan(&a.ID, &a.Kind, &a.Owner, &a.Currency, &a.Available, &a.Held, &a.Version, &created, &updatedAt,
			&l.LedgerAvailable, &l.LedgerHeld); err != nil {
			return nil, err
		}
		a.CreatedAt, a.UpdatedAt = fromMS(created), fromMS(updatedAt)
		l.Account = &a
		return &l, nil
	}, qWalletLedgers, p.AfterID, p.Limit)
}

// scanAll runs a query and scans every row with scan; errors are wrapped with what.
func scanAll[T any](t *tx, ctx context.Context, what string, scan func(rowScanner) (T, error), q *query, args ...any) ([]T, error) {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
