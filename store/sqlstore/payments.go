package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const paymentColumns = `id, order_id, attempt, channel, channel_txn_id, amount, currency, state, fail_reason,
	created_at, succeeded_at, refunded_at, duplicate_of, variant, provider_ref, payer_id, next_action, metadata`

var (
	qPaymentNextAttempt = sqlText(`SELECT COALESCE(MAX(attempt), 0) + 1 FROM payments WHERE order_id = ?`)
	qPaymentInsert      = sqlText(`INSERT INTO payments (` + paymentColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	// qPaymentInsertNext numbers the attempt in the insert and returns it (dialects with
	// RETURNING; MySQL refuses a subquery on the table an INSERT writes).
	// Every registered statement is prepared at Open, so MySQL 8, which has neither, gets
	// the plain insert (never run there).
	qPaymentInsertNext = newQuery(func(d *dialect) string {
		if !d.returning {
			return `INSERT INTO payments (` + paymentColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
		}
		return `INSERT INTO payments (` + paymentColumns + `) VALUES (?, ?,
			(SELECT COALESCE(MAX(attempt), 0) + 1 FROM payments WHERE order_id = ?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING attempt`
	})
	qPaymentGet        = sqlText(`SELECT ` + paymentColumns + ` FROM payments WHERE id = ?`)
	qPaymentGetByTxnID = sqlText(`SELECT ` + paymentColumns + ` FROM payments WHERE channel_txn_id = ?`)
	qPaymentList       = sqlText(`SELECT ` + paymentColumns + ` FROM payments WHERE ? = '' OR order_id = ? ORDER BY order_id, attempt`)
	// The handoff (next_action) is the buyer's means to pay an initiated attempt: it is
	// dropped once the attempt has an outcome, so a client_secret never outlives its use.
	qPaymentSetState = sqlText(`UPDATE payments SET state = ?, next_action = NULL, channel_txn_id = COALESCE(?, channel_txn_id),
			fail_reason = COALESCE(?, fail_reason), succeeded_at = COALESCE(?, succeeded_at), refunded_at = COALESCE(?, refunded_at)
			WHERE id = ? AND state IN (` + stateIn + `)`)
	qPaymentSetHandoff = sqlText(`UPDATE payments SET provider_ref = ?, next_action = ? WHERE id = ?`)
)

func scanPayment(r rowScanner) (*orderly.Payment, error) {
	var (
		p                       orderly.Payment
		txnID, duplicateOf      sql.NullString
		createdAt               int64
		succeededAt, refundedAt sql.NullInt64
		nextAction, metadata    sql.NullString
	)
	if err := r.Scan(&p.ID, &p.OrderID, &p.Attempt, &p.Channel, &txnID, &p.Amount, &p.Currency, &p.State,
		&p.FailReason, &createdAt, &succeededAt, &refundedAt, &duplicateOf, &p.Variant, &p.ProviderRef, &p.PayerID,
		&nextAction, &metadata); err != nil {
		return nil, err
	}
	m, err := decodeMetadata(metadata, "payment "+p.ID)
	if err != nil {
		return nil, err
	}
	p.Metadata = m
	if nextAction.Valid && nextAction.String != "" {
		p.NextAction = new(orderly.NextAction)
		if err := json.Unmarshal([]byte(nextAction.String), p.NextAction); err != nil {
			return nil, fmt.Errorf("payment %s next_action: %w", p.ID, err)
		}
	}
	p.ChannelTxnID, p.DuplicateOf, p.CreatedAt = txnID.String, duplicateOf.String, fromMS(createdAt)
	p.SucceededAt, p.RefundedAt = timePtr(succeededAt), timePtr(refundedAt)
	return &p, nil
}

// PaymentInsert implements store.Tx. The attempt number is assigned here: one more than the
// order's last attempt.
func (t *tx) PaymentInsert(ctx context.Context, p *orderly.Payment) error {
	if t.db.d.returning {
		err := t.queryRow(ctx, qPaymentInsertNext, p.ID, p.OrderID, p.OrderID, p.Channel, nullString(p.ChannelTxnID), p.Amount, p.Currency,
			p.State, p.FailReason, ms(p.CreatedAt), nullMS(p.SucceededAt), nullMS(p.RefundedAt), nullString(p.DuplicateOf), p.Variant,
			p.ProviderRef, p.PayerID, nextActionJSON(p.NextAction), encodeMetadata(p.Metadata)).Scan(&p.Attempt)
		return t.translate(t.check(err), "payment "+p.ID)
	}
	if err := t.queryRow(ctx, qPaymentNextAttempt, p.OrderID).Scan(&p.Attempt); err != nil {
		return translate(err, "payment attempt of "+p.OrderID)
	}
	_, err := t.exec(ctx, "payment "+p.ID, qPaymentInsert,
		p.ID, p.OrderID, p.Attempt, p.Channel, nullString(p.ChannelTxnID), p.Amount, p.Currency, p.State,
		p.FailReason, ms(p.CreatedAt), nullMS(p.SucceededAt), nullMS(p.RefundedAt), nullString(p.DuplicateOf), p.Variant,
		p.ProviderRef, p.PayerID, nextActionJSON(p.NextAction), encodeMetadata(p.Metadata))
	return err
}

// nextActionJSON is the next_action column of a: its JSON, NULL for none.
func nextActionJSON(a *orderly.NextAction) sql.NullString {
	if a == nil {
		return sql.NullString{}
	}
	//nolint:gosec // G117: the client_secret is the buyer's handoff, made for the client, not the merchant's key.
	b, _ := json.Marshal(a) // strings only: cannot fail
	return sql.NullString{String: string(b), Valid: true}
}

// PaymentSetHandoff implements store.Tx.
func (t *tx) PaymentSetHandoff(ctx context.Context, id, providerRef string, next *orderly.NextAction) error {
	_, err := t.exec(ctx, "payment "+id, qPaymentSetHandoff, providerRef, nextActionJSON(next), id)
	return err
}

// PaymentGet implements store.Tx.
func (t *tx) PaymentGet(ctx context.Context, id string) (*orderly.Payment, error) {
	p, err := scanPayment(t.queryRow(ctx, qPaymentGet, id))
	return p, translate(err, "payment "+id)
}

// PaymentGetByChannelTxnID implements store.Tx.
func (t *tx) PaymentGetByChannelTxnID(ctx context.Context, channelTxnID string) (*orderly.Payment, error) {
	p, err := scanPayment(t.queryRow(ctx, qPaymentGetByTxnID, channelTxnID))
	return p, translate(err, "payment with channel_txn_id "+channelTxnID)
}

// PaymentList implements store.Tx.
func (t *tx) PaymentList(ctx context.Context, orderID string) ([]*orderly.Payment, error) {
	rows, err := t.query(ctx, qPaymentList, orderID, orderID)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Payment
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			return nil, fmt.Errorf("list payments: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// PaymentSetState implements store.Tx.
func (t *tx) PaymentSetState(ctx context.Context, p *store.PaymentSetStateParams) (bool, error) {
	if len(p.From) == 0 {
		return false, fmt.Errorf("set state of payment %s: no From states", p.ID)
	}
	args := append([]any{p.To, nullString(p.ChannelTxnID), nullString(p.FailReason), nullMS(p.SucceededAt),
		nullMS(p.RefundedAt), p.ID}, stateArgs(p.From)...)
	n, err := t.exec(ctx, "payment "+p.ID, qPaymentSetState, args...)
	return n == 1, err
}
