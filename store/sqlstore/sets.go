package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// The statements of this file write the rows of many orders, payments, transfers or
// sagas at once: a batch of wallet checkouts run as sets (saga.LocalTxSet, package
// checkout) takes a few statements per table for the whole batch instead of a few per
// checkout.

var (
	// qStockLockAvailableMany reads (and locks, in SKU order) the available units of a
	// JSON list of SKUs.
	qStockLockAvailableMany = newQuery(func(d *dialect) string {
		return d.selectByIDs("stock.sku, stock.available", "stock", "sku", d.ids, "1 = 1", ` ORDER BY stock.sku`+d.lockRows)
	})
	// qStockReserveSet moves the units of a JSON list of [sku, n] pairs (one per SKU) from
	// available to held, each guarded by available >= n.
	qStockReserveSet = newQuery(func(d *dialect) string {
		switch d {
		case mysqlDialect:
			return `UPDATE stock FORCE INDEX (PRIMARY) JOIN JSON_TABLE(?, '$[*]' COLUMNS (
				sku VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]', n BIGINT PATH '$[1]')) AS j
				ON stock.sku = j.sku SET stock.available = stock.available - j.n, stock.held = stock.held + j.n
				WHERE stock.available >= j.n`
		case postgresDialect:
			return `UPDATE stock SET available = available - j.n, held = held + j.n
				FROM (SELECT e->>0 AS sku, (e->>1)::bigint AS n FROM jsonb_array_elements(?::jsonb) AS t(e)) AS j
				WHERE stock.sku = j.sku AND stock.available >= j.n`
		default:
			return `UPDATE stock SET available = available - j.n, held = held + j.n
				FROM (SELECT json_extract(value, '$[0]') AS sku, json_extract(value, '$[1]') AS n FROM json_each(?)) AS j
				WHERE stock.sku = j.sku AND stock.available >= j.n`
		}
	})
	// qWalletAccountsLock reads (and locks, in id order) the accounts of a JSON list of ids.
	qWalletAccountsLock = newQuery(func(d *dialect) string {
		cols := "wallet_accounts.id, kind, owner, currency, available, held, version, created_at, updated_at"
		return d.selectByIDs(cols, "wallet_accounts", "id", d.ids, "1 = 1", ` ORDER BY wallet_accounts.id`+d.lockRows)
	})
	// qWalletAccountsMove applies a JSON list of [id, available, held, transfers] deltas (one
	// per account; the version grows by transfers) with WalletAccountMove's guard; the updated_at argument comes first, except
	// on MySQL, where the list does (walletMovesArgs).
	qWalletAccountsMove = newQuery(func(d *dialect) string {
		const guard = ` wallet_accounts.held + j.h >= 0 AND (wallet_accounts.kind = 'system' OR wallet_accounts.available + j.a >= 0)`
		switch d {
		case mysqlDialect:
			return `UPDATE wallet_accounts FORCE INDEX (PRIMARY) JOIN JSON_TABLE(?, '$[*]' COLUMNS (
				id VARCHAR(300) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]', a BIGINT PATH '$[1]', h BIGINT PATH '$[2]',
				c BIGINT PATH '$[3]')) AS j
				ON wallet_accounts.id = j.id
				SET wallet_accounts.available = wallet_accounts.available + j.a, wallet_accounts.held = wallet_accounts.held + j.h,
				wallet_accounts.version = wallet_accounts.version + j.c, wallet_accounts.updated_at = ?
				WHERE` + guard
		case postgresDialect:
			return `UPDATE wallet_accounts SET available = available + j.a, held = held + j.h, version = version + j.c, updated_at = ?
				FROM (SELECT e->>0 AS id, (e->>1)::bigint AS a, (e->>2)::bigint AS h, (e->>3)::bigint AS c FROM jsonb_array_elements(?::jsonb) AS t(e)) AS j
				WHERE wallet_accounts.id = j.id AND` + guard
		default:
			return `UPDATE wallet_accounts SET available = available + j.a, held = held + j.h, version = version + j.c, updated_at = ?
				FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS a, json_extract(value, '$[2]') AS h,
				json_extract(value, '$[3]') AS c
				FROM json_each(?)) AS j
				WHERE wallet_accounts.id = j.id AND` + guard
		}
	})
)

// The multi-row INSERTs' heads and rows.
const (
	qSagaInsertHead           = `INSERT INTO saga_instances (` + sagaColumns + `)`
	qSagaInsertRow            = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`
	qPaymentInsertHead        = `INSERT INTO payments (` + paymentColumns + `)`
	qPaymentInsertRow         = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qWalletTransferInsertHead = `INSERT INTO wallet_transfers (` + walletTransferColumns + `)`
	qWalletTransferInsertRow  = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// StockLockAvailableMany implements store.Tx. It takes the SKUs' gates first (gate.go), in
// key order.
func (t *tx) StockLockAvailableMany(ctx context.Context, skus []string) (map[string]int64, error) {
	skus = slices.Compact(slices.Sorted(slices.Values(skus)))
	if len(skus) == 0 {
		return map[string]int64{}, nil
	}
	for _, sku := range skus {
		if err := t.gate("stock " + sku); err != nil {
			return nil, err
		}
	}
	rows, err := t.query(ctx, qStockLockAvailableMany, jsonList(skus))
	if err != nil {
		return nil, fmt.Errorf("lock stock of %d skus: %w", len(skus), err)
	}
	defer rows.Close()
	out := make(map[string]int64, len(skus))
	for rows.Next() {
		var (
			sku       string
			available int64
		)
		if err := rows.Scan(&sku, &available); err != nil {
			return nil, fmt.Errorf("lock stock of %d skus: %w", len(skus), err)
		}
		out[sku] = available
	}
	return out, rows.Err()
}

// StockReserveSet implements store.Tx.
func (t *tx) StockReserveSet(ctx context.Context, ps []*store.StockReserveParams) error {
	if len(ps) == 0 {
		return nil
	}
	perSKU := map[string]int64{}
	args := make([]any, 0, len(ps)*4)
	for _, p := range ps {
		if p.Quantity < 1 {
			return fmt.Errorf("reserve %d units of %s for order %s: not a quantity", p.Quantity, p.SKU, p.OrderID)
		}
		perSKU[p.SKU] += p.Quantity
		args = append(args, p.OrderID, p.SKU, p.Quantity, ms(p.Now))
	}
	skus := slices.Sorted(maps.Keys(perSKU))
	for _, sku := range skus {
		if err := t.gate("stock " + sku); err != nil {
			return err
		}
	}
	pairs := make([][2]any, len(skus))
	for i, sku := range skus {
		pairs[i] = [2]any{sku, perSKU[sku]}
	}
	b, err := json.Marshal(pairs)
	if err != nil {
		return err
	}
	n, err := t.exec(ctx, fmt.Sprintf("reserve %d skus", len(skus)), qStockReserveSet, string(b))
	if err != nil {
		return err
	} else if n != int64(len(skus)) {
		return fmt.Errorf("reserve stock of %d skus for %d reservations: %d not available (the caller counted them under the rows' locks)",
			len(skus), len(ps), int64(len(skus))-n)
	}
	return t.insertMany(ctx, fmt.Sprintf("%d reservations", len(ps)), qReservationInsertHead, qReservationInsertRow, args)
}

// ReservationsCommitMany implements store.Tx.
func (t *tx) ReservationsCommitMany(ctx context.Context, orderIDs []string, now time.Time) ([]*orderly.Reservation, error) {
	return t.moveReservations(ctx, orderIDs, now, orderly.ReservationCommitted, qStockCommit, qStockCommitMany)
}

// PaymentsInsertMany implements store.Tx.
func (t *tx) PaymentsInsertMany(ctx context.Context, ps []*orderly.Payment) error {
	if len(ps) == 0 {
		return nil
	}
	args := make([]any, 0, len(ps)*14)
	for _, p := range ps {
		if p.Attempt < 1 {
			return fmt.Errorf("insert payment %s: attempt %d: PaymentsInsertMany writes numbered attempts", p.ID, p.Attempt)
		}
		args = append(args, p.ID, p.OrderID, p.Attempt, p.Channel, nullString(p.ChannelTxnID), p.Amount, p.Currency, p.State,
			p.FailReason, ms(p.CreatedAt), nullMS(p.SucceededAt), nullMS(p.RefundedAt), nullString(p.DuplicateOf), p.Variant,
			p.ProviderRef, p.PayerID, nextActionJSON(p.NextAction), encodeMetadata(p.Metadata))
	}
	return t.insertMany(ctx, fmt.Sprintf("%d payments", len(ps)), qPaymentInsertHead, qPaymentInsertRow, args)
}

// WalletAccountsLock implements store.Tx.
func (t *tx) WalletAccountsLock(ctx context.Context, ids []string) ([]*orderly.WalletAccount, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := t.query(ctx, qWalletAccountsLock, idList(slices.Compact(slices.Sorted(slices.Values(ids)))))
	if err != nil {
		return nil, fmt.Errorf("lock %d wallet accounts: %w", len(ids), err)
	}
	defer rows.Close()
	var out []*orderly.WalletAccount
	for rows.Next() {
		a, err := scanWalletAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("lock %d wallet accounts: %w", len(ids), err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// WalletAccountsMove implements store.Tx.
func (t *tx) WalletAccountsMove(ctx context.Context, ps []*store.WalletAccountMoveParams) (int64, error) {
	if len(ps) == 0 {
		return 0, nil
	}
	moves := make([][4]any, len(ps))
	seen := make(map[string]bool, len(ps))
	for i, p := range ps {
		if seen[p.ID] {
			return 0, fmt.Errorf("move wallet accounts: account %s twice in one statement", p.ID)
		}
		seen[p.ID] = true
		moves[i] = [4]any{p.ID, p.Available, p.Held, max(p.Transfers, 1)}
	}
	b, err := json.Marshal(moves)
	if err != nil {
		return 0, err
	}
	what := fmt.Sprintf("move %d wallet accounts", len(ps))
	if t.db.d == mysqlDialect {
		return t.exec(ctx, what, qWalletAccountsMove, string(b), ms(ps[0].Now))
	}
	return t.exec(ctx, what, qWalletAccountsMove, ms(ps[0].Now), string(b))
}

// WalletTransfersInsertMany implements store.Tx.
func (t *tx) WalletTransfersInsertMany(ctx context.Context, trs []*orderly.WalletTransfer) error {
	if len(trs) == 0 {
		return nil
	}
	args := make([]any, 0, len(trs)*11)
	for _, tr := range trs {
		args = append(args, tr.ID, tr.Kind, nullString(tr.IdempotencyKey), tr.AccountID, nullString(tr.CounterpartyID), tr.Currency,
			tr.Amount, nullString(tr.HoldID), nullString(tr.RefundOf), tr.Refunded, ms(tr.CreatedAt))
	}
	return t.insertMany(ctx, fmt.Sprintf("%d wallet transfers", len(trs)), qWalletTransferInsertHead, qWalletTransferInsertRow, args)
}

// SagaInsertMany implements store.Tx.
func (t *tx) SagaInsertMany(ctx context.Context, ss []*store.SagaInstance) error {
	if len(ss) == 0 {
		return nil
	}
	args := make([]any, 0, len(ss)*13)
	for _, s := range ss {
		args = append(args, s.ID, s.Definition, s.State, s.CurrentStep, string(s.Input),
			nullMS(s.WakeAt), nullMS(s.StepDeadline), s.Attempts, nullMS(s.AttemptStartedAt), nullString(s.LastError),
			ms(s.CreatedAt), ms(s.UpdatedAt), nullMS(s.EndedAt))
	}
	if err := t.insertMany(ctx, fmt.Sprintf("%d sagas", len(ss)), qSagaInsertHead, qSagaInsertRow, args); err != nil {
		return err
	}
	for _, s := range ss {
		s.Version = 1
	}
	return nil
}
