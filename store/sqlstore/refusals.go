package sqlstore

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/orderlyhq/orderly"
)

// Column limits of callback_refusals (the MySQL sizes, applied in every dialect so that all
// three store the same text).
const (
	refusalIDMax     = 255
	refusalDetailMax = 1000
	refusalStatusMax = 64
	refusalCurMax    = 16
	refusalBodyMax   = 64 << 10
)

var (
	qRefusalInsert = sqlText(`INSERT INTO callback_refusals (payment_id, order_id, reason, detail, status, amount, currency,
		channel_txn_id, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qRefusalList = sqlText(`SELECT id, payment_id, order_id, reason, detail, status, amount, currency, channel_txn_id, body,
		created_at FROM callback_refusals WHERE payment_id = ? ORDER BY id LIMIT ?`)
)

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence; invalid UTF-8 is
// replaced, since a provider's body may hold anything and PostgreSQL refuses invalid text.
func truncate(s string, n int) string {
	s = string([]rune(s)) // replaces invalid sequences with U+FFFD
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// CallbackRefusalInsert implements store.Tx.
func (t *tx) CallbackRefusalInsert(ctx context.Context, r *orderly.CallbackRefusal) error {
	_, err := t.exec(ctx, "callback refusal", qRefusalInsert, truncate(r.PaymentID, refusalIDMax),
		truncate(r.OrderID, refusalIDMax), r.Reason, truncate(r.Detail, refusalDetailMax), truncate(r.Status, refusalStatusMax),
		r.Amount, truncate(r.Currency, refusalCurMax), truncate(r.ChannelTxnID, refusalIDMax), truncate(r.Body, refusalBodyMax),
		ms(r.CreatedAt))
	return err
}

// CallbackRefusalList implements store.Tx.
func (t *tx) CallbackRefusalList(ctx context.Context, paymentID string, limit int) ([]*orderly.CallbackRefusal, error) {
	rows, err := t.query(ctx, qRefusalList, paymentID, limit)
	if err != nil {
		return nil, fmt.Errorf("callback refusals of %s: %w", paymentID, err)
	}
	defer rows.Close()
	var out []*orderly.CallbackRefusal
	for rows.Next() {
		var (
			r  orderly.CallbackRefusal
			at int64
		)
		if err := rows.Scan(&r.ID, &r.PaymentID, &r.OrderID, &r.Reason, &r.Detail, &r.Status, &r.Amount, &r.Currency,
			&r.ChannelTxnID, &r.Body, &at); err != nil {
			return nil, fmt.Errorf("callback refusals of %s: %w", paymentID, err)
		}
		r.CreatedAt = fromMS(at)
		out = append(out, &r)
	}
	return out, rows.Err()
}
