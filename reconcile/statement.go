package reconcile

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// StatementLine is one transaction of a gateway's settlement statement.
type StatementLine struct {
	ChannelTxnID string
	Amount       int64 // minor units
	Currency     string
	Status       string // the gateway's word: succeeded, settled, captured, … ; "failed" lines are skipped
	Time         time.Time
	// Refund is true for money given back (status refunded or refund, or type refund):
	// ChannelTxnID then names the refund, by the provider's refund id or by ours.
	Refund bool
}

// statementColumns are the columns a statement CSV must have, in any order, named in its
// header row.
var statementColumns = []string{"channel_txn_id", "amount", "currency", "status", "time"}

// ReadStatement parses a settlement statement CSV: a header row naming channel_txn_id,
// amount (integer minor units, positive for a refund too), currency (ISO 4217), status and
// time (RFC 3339), in any order (other columns are ignored), then one row per transaction.
// A row is a refund (StatementLine.Refund) when its status is refunded or refund, or when
// the optional type column says refund; its channel_txn_id is then the provider's refund
// id or our refund id. Status and type are read case-insensitively. Errors name the line:
// a missing column, a malformed amount or time, an empty transaction id.
func ReadStatement(in io.Reader) ([]StatementLine, error) {
	cr := csv.NewReader(in)
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("statement: header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff") // the byte order mark spreadsheet programs write first
		}
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	for _, c := range statementColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("statement: the header has no %q column (want %s)", c, strings.Join(statementColumns, ", "))
		}
	}
	var out []StatementLine
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("statement: %w", err)
		}
		line, _ := cr.FieldPos(0)
		l := StatementLine{ChannelTxnID: strings.TrimSpace(rec[col["channel_txn_id"]]),
			Currency: strings.ToUpper(strings.TrimSpace(rec[col["currency"]])), Status: strings.ToLower(strings.TrimSpace(rec[col["status"]]))}
		if l.ChannelTxnID == "" {
			return nil, fmt.Errorf("statement: line %d: empty channel_txn_id", line)
		}
		if l.Amount, err = strconv.ParseInt(strings.TrimSpace(rec[col["amount"]]), 10, 64); err != nil {
			return nil, fmt.Errorf("statement: line %d: amount must be an integer in minor units: %w", line, err)
		}
		if l.Time, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(rec[col["time"]])); err != nil {
			return nil, fmt.Errorf("statement: line %d: time must be RFC 3339: %w", line, err)
		}
		l.Time = l.Time.UTC()
		l.Refund = l.Status == "refunded" || l.Status == "refund"
		if i, ok := col["type"]; ok && strings.EqualFold(strings.TrimSpace(rec[i]), "refund") {
			l.Refund = true
		}
		out = append(out, l)
	}
}

// Statement compares the settlement statement of one channel ("stripe", "alipay"; its
// variants included) with that channel's payments and refunds and returns its findings
// (never nil): a transaction of the statement that no payment of the channel records, or a
// refund line that no refund of the channel's payments records, by the provider's refund
// id or by ours (KindStatementMissingOurs); one whose amount or currency differs
// (KindStatementAmountMismatch); a refund the statement lists that we still read requested
// or failed (KindStatementRefundUnconfirmed); a transaction or refund listed more than once
// (KindStatementDuplicate, one finding however many times, with the count: the gateway
// settled it twice, or the file repeats it; it is compared once; payments and refunds are
// counted apart); and a capture, or a succeeded refund, of the channel between the
// statement's first and last time that the statement does not list
// (KindStatementMissingTheirs). Payments of other channels and of the wallet, and their
// refunds, are left out: they are on no statement of this channel. Lines with status
// failed are skipped. Nothing is repaired: each is an operator task. Errors: EINVALID for
// an empty channel; the store's.
func (r *Reconciler) Statement(ctx context.Context, channel string, lines []StatementLine) ([]*Finding, error) {
	if channel == "" {
		return nil, orderly.Errorf(orderly.EINVALID, "reconcile: a statement is one channel's: name it")
	}
	out := []*Finding{}
	// count and refunds count the lines of each payment transaction and of each refund: a
	// refund may be listed under its payment's transaction id.
	count, refunds := map[string]int{}, map[string]int{}
	var distinct []StatementLine // the first line of each transaction, in the statement's order
	var from, to time.Time
	for _, l := range lines {
		if l.Status == "failed" {
			continue
		}
		c := count
		if l.Refund {
			c = refunds
		}
		if c[l.ChannelTxnID]++; c[l.ChannelTxnID] == 1 {
			distinct = append(distinct, l)
		}
		if from.IsZero() || l.Time.Before(from) {
			from = l.Time
		}
		if l.Time.After(to) {
			to = l.Time
		}
	}
	for _, l := range distinct {
		n, what := count[l.ChannelTxnID], "transaction"
		if l.Refund {
			n, what = refunds[l.ChannelTxnID], "refund"
		}
		if n > 1 {
			out = append(out, &Finding{Kind: KindStatementDuplicate, Target: l.ChannelTxnID,
				Detail: fmt.Sprintf("%s %s is listed %d times (first with %d %s, %s at %s)", what, l.ChannelTxnID, n,
					l.Amount, l.Currency, l.Status, l.Time.Format(time.RFC3339))})
		}
	}
	for start := 0; start < len(distinct); start += r.cfg.BatchSize {
		batch := distinct[start:min(start+r.cfg.BatchSize, len(distinct))]
		err := r.cfg.Store.Read(ctx, func(tx store.Tx) error {
			for _, l := range batch {
				line := statementLine
				if l.Refund {
					line = statementRefund
				}
				f, err := line(ctx, tx, channel, l)
				if err != nil {
					return err
				} else if f != nil {
					out = append(out, f)
				}
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("reconcile: statement: %w", err)
		}
	}
	if len(distinct) == 0 {
		return out, nil
	}
	_, err := Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		ps, err := tx.ReconcilePaymentsCaptured(ctx, channel, from, to, after, limit)
		for _, p := range ps {
			if count[p.ChannelTxnID] == 0 {
				out = append(out, &Finding{Kind: KindStatementMissingTheirs, OrderID: p.OrderID, Target: p.ChannelTxnID,
					Detail: fmt.Sprintf("payment %s captured %d %s on %s (transaction %s) but the statement does not list it",
						p.ID, p.Amount, p.Currency, p.Route(), p.ChannelTxnID)})
			}
			after = p.ID
		}
		return len(ps), after, err
	})
	if err != nil {
		return out, fmt.Errorf("reconcile: statement: %w", err)
	}
	_, err = Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		fs, err := tx.ReconcileRefundsSucceeded(ctx, channel, from, to, after, limit)
		for _, f := range fs {
			if (f.ProviderRef == "" || refunds[f.ProviderRef] == 0) && refunds[f.ID] == 0 {
				out = append(out, &Finding{Kind: KindStatementMissingTheirs, OrderID: f.OrderID, Target: cmp.Or(f.ProviderRef, f.ID),
					Detail: fmt.Sprintf("refund %s (provider ref %q) of payment %s gave back %d %s at %s but the statement does not list it",
						f.ID, f.ProviderRef, f.PaymentID, f.Amount, f.Currency, f.CompletedAt.Format(time.RFC3339))})
			}
			after = f.ID
		}
		return len(fs), after, err
	})
	if err != nil {
		return out, fmt.Errorf("reconcile: statement: %w", err)
	}
	return out, nil
}

// statementLine compares one transaction of channel's statement with the payment that
// records it: a finding, or nil when they agree.
func statementLine(ctx context.Context, tx store.Tx, channel string, l StatementLine) (*Finding, error) {
	p, err := tx.PaymentGetByChannelTxnID(ctx, l.ChannelTxnID)
	switch {
	case orderly.ErrorCode(err) == orderly.ENOTFOUND:
		return &Finding{Kind: KindStatementMissingOurs, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("transaction %s of %d %s (%s at %s) has no payment here", l.ChannelTxnID, l.Amount,
				l.Currency, l.Status, l.Time.Format(time.RFC3339))}, nil
	case err != nil:
		return nil, err
	case p.Channel != channel:
		return &Finding{Kind: KindStatementMissingOurs, OrderID: p.OrderID, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("transaction %s of %d %s (%s at %s) is recorded on payment %s of channel %s, not %s",
				l.ChannelTxnID, l.Amount, l.Currency, l.Status, l.Time.Format(time.RFC3339), p.ID, p.Route(), channel)}, nil
	case p.Amount != l.Amount || p.Currency != l.Currency:
		return &Finding{Kind: KindStatementAmountMismatch, OrderID: p.OrderID, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("transaction %s: statement %d %s, payment %s %d %s", l.ChannelTxnID, l.Amount, l.Currency,
				p.ID, p.Amount, p.Currency)}, nil
	}
	return nil, nil
}

// statementRefund compares one refund line of channel's statement with the refund that
// records it, found by the provider's refund id or else by ours: a finding, or nil when
// they agree.
func statementRefund(ctx context.Context, tx store.Tx, channel string, l StatementLine) (*Finding, error) {
	line := fmt.Sprintf("refund %s of %d %s (%s at %s)", l.ChannelTxnID, l.Amount, l.Currency, l.Status, l.Time.Format(time.RFC3339))
	f, err := tx.RefundGetByProviderRef(ctx, l.ChannelTxnID)
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		f, err = tx.RefundGet(ctx, l.ChannelTxnID)
	}
	switch {
	case orderly.ErrorCode(err) == orderly.ENOTFOUND:
		return &Finding{Kind: KindStatementMissingOurs, Target: l.ChannelTxnID, Detail: line + " has no refund here"}, nil
	case err != nil:
		return nil, err
	}
	p, err := tx.PaymentGet(ctx, f.PaymentID)
	if err != nil {
		return nil, fmt.Errorf("payment of refund %s: %w", f.ID, err)
	}
	switch {
	case p.Channel != channel:
		return &Finding{Kind: KindStatementMissingOurs, OrderID: f.OrderID, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("%s is refund %s of payment %s of channel %s, not %s", line, f.ID, p.ID, p.Route(), channel)}, nil
	case f.Amount != l.Amount || f.Currency != l.Currency:
		return &Finding{Kind: KindStatementAmountMismatch, OrderID: f.OrderID, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("refund %s: statement %d %s, refund %s %d %s", l.ChannelTxnID, l.Amount, l.Currency,
				f.ID, f.Amount, f.Currency)}, nil
	case f.State != orderly.RefundSucceeded:
		why := "still requested: the provider's confirmation never reached us"
		if f.State == orderly.RefundFailed {
			why = "recorded failed: the money went back all the same"
			if f.FailReason != "" {
				why = fmt.Sprintf("recorded failed (%s): the money went back all the same", f.FailReason)
			}
		}
		return &Finding{Kind: KindStatementRefundUnconfirmed, OrderID: f.OrderID, Target: l.ChannelTxnID,
			Detail: fmt.Sprintf("%s is listed by the provider, but refund %s of payment %s is %s", line, f.ID, p.ID, why)}, nil
	}
	return nil, nil
}
