package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const paymentColumns = `id, order_id, attempt, channel, channel_txn_id, amount, currency, state, fail_reason,
	created_at, succeeded_at, refunded_at`

func scanPayment(r rowScanner) (*orderly.Payment, error) {
	var (
		p                       orderly.Payment
		txnID                   sql.NullString
		createdAt               int64
		succeededAt, refundedAt sql.NullInt64
	)
	if err := r.Scan(&p.ID, &p.OrderID, &p.Attempt, &p.Channel, &txnID, &p.Amount, &p.Currency, &p.State,
		&p.FailReason, &createdAt, &succeededAt, &refundedAt); err != nil {
		return nil, err
	}
	p.ChannelTxnID, p.CreatedAt = txnID.String, fromMS(createdAt)
	p.SucceededAt, p.RefundedAt = timePtr(succeededAt), timePtr(refundedAt)
	return &p, nil
}

// PaymentInsert implements store.Tx. The attempt number is assigned here: one more than the
// order's last attempt.
func (t *tx) PaymentInsert(ctx context.Context, p *orderly.Payment) error {
	err := t.q.QueryRowContext(ctx, `SELECT COALESCE(MAX(attempt), 0) + 1 FROM payments WHERE order_id = ?`,
		p.OrderID).Scan(&p.Attempt)
	if err != nil {
		return translate(err, "payment attempt of "+p.OrderID)
	}
	_, err = t.exec(ctx, "payment "+p.ID, `INSERT INTO payments (`+paymentColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		p.ID, p.OrderID, p.Attempt, p.Channel, nullString(p.ChannelTxnID), p.Amount, p.Currency, p.State,
		p.FailReason, ms(p.CreatedAt), nullMS(p.SucceededAt), nullMS(p.RefundedAt))
	return err
}

// PaymentGet implements store.Tx.
func (t *tx) PaymentGet(ctx context.Context, id string) (*orderly.Payment, error) {
	p, err := scanPayment(t.q.QueryRowContext(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = ?`, id))
	return p, translate(err, "payment "+id)
}

// PaymentList implements store.Tx.
func (t *tx) PaymentList(ctx context.Context, orderID string) ([]*orderly.Payment, error) {
	rows, err := t.q.QueryContext(ctx, `SELECT `+paymentColumns+` FROM payments
		WHERE ? = '' OR order_id = ? ORDER BY order_id, attempt`, orderID, orderID)
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
	set, args := []string{"state = ?"}, []any{p.To}
	if p.ChannelTxnID != "" {
		set = append(set, "channel_txn_id = ?")
		args = append(args, p.ChannelTxnID)
	}
	if p.FailReason != "" {
		set = append(set, "fail_reason = ?")
		args = append(args, p.FailReason)
	}
	if p.SucceededAt != nil {
		set = append(set, "succeeded_at = ?")
		args = append(args, ms(*p.SucceededAt))
	}
	if p.RefundedAt != nil {
		set = append(set, "refunded_at = ?")
		args = append(args, ms(*p.RefundedAt))
	}
	args = append(args, p.ID)
	args = append(args, anys(p.From)...)
	n, err := t.exec(ctx, "payment "+p.ID, "UPDATE payments SET "+strings.Join(set, ", ")+
		" WHERE id = ? AND state IN ("+placeholders(len(p.From))+")", args...)
	return n == 1, err
}
