package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// builtinChecks returns the built-in checks, in the order their findings are reported.
func builtinChecks() []Check {
	return []Check{
		{Kind: KindClosedPaid, Scan: scanClosedPaid, Order: orderClosedPaid, Repair: repairClosedPaid},
		{Kind: KindClosedHolds, Scan: scanClosedHolds, Order: orderClosedHolds, Repair: repairClosedHolds},
		{Kind: KindClosedPaying, Scan: scanClosedPaying, Order: orderClosedPaying, Repair: repairClosedPaying},
		{Kind: KindPaidUnbacked, Scan: scanPaidUnbacked, Order: orderPaidUnbacked},
		{Kind: KindStockMismatch, Scan: scanStock, Order: orderStock, Repair: repairStock},
		{Kind: KindRefundMismatch, Scan: scanRefunds, Order: orderRefunds},
		{Kind: KindRefundStuck, Scan: scanRefundsStuck, Order: orderRefundsStuck},
		{Kind: KindOverdueOrder, Scan: scanOverdue, Order: orderOverdue, Repair: repairOverdue},
		{Kind: KindOutboxDead, Scan: scanOutboxDead, Order: orderOutbox(KindOutboxDead)},
		{Kind: KindOutboxStuck, Scan: scanOutboxStuck, Order: orderOutbox(KindOutboxStuck)},
	}
}

// Pages runs read, one read transaction per batch of r's BatchSize rows, until a batch
// comes back short; read returns the batch's size and its last key. It returns the rows
// read. A Check's Scan of another package walks its rows with it.
func Pages[K any](ctx context.Context, r *Reconciler, start K, read func(tx store.Tx, after K, limit int) (int, K, error)) (int64, error) {
	var scanned int64
	after := start
	for {
		var n int
		err := r.cfg.Store.Read(ctx, func(tx store.Tx) error {
			var err error
			n, after, err = read(tx, after, r.cfg.BatchSize)
			return err
		})
		scanned += int64(n)
		if err != nil || n < r.cfg.BatchSize {
			return scanned, err
		}
	}
}

func closedPaidFinding(p *orderly.Payment) *Finding {
	return &Finding{Kind: KindClosedPaid, OrderID: p.OrderID, Target: p.ID,
		Detail: fmt.Sprintf("payment %s captured %d %s (transaction %q) for a closed order and no refund is requested",
			p.ID, p.Amount, p.Currency, p.ChannelTxnID)}
}

func scanClosedPaid(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, sinceID(since), func(tx store.Tx, after string, limit int) (int, string, error) {
		ps, err := tx.ReconcileClosedPaid(ctx, after, limit)
		for _, p := range ps {
			emit(closedPaidFinding(p))
			after = p.ID
		}
		return len(ps), after, err
	})
}

func orderClosedPaid(_ *Reconciler, s *Snapshot) []*Finding {
	var out []*Finding
	if s.Order.State != orderly.StateClosed {
		return nil
	}
	for _, p := range s.Payments {
		if p.State == orderly.PaymentSucceeded {
			out = append(out, closedPaidFinding(p))
		}
	}
	return out
}

func repairClosedPaid(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error) {
	var ok bool
	err := r.inTx(ctx, by, func(tx store.Tx, now time.Time) error {
		var err error
		if ok, err = r.cfg.Payments.RefundUnkept(ctx, tx, f.Target, now); err != nil || !ok {
			return err
		}
		return audit(ctx, tx, by, f, f.OrderID, now, map[string]any{"payment_id": f.Target, "done": "refund requested"})
	})
	return ok, err
}

// holds describes what a closed order still holds: its held reservations and its coupon
// when frozen for it; "" when nothing.
func holds(o *orderly.Order, rs []*orderly.Reservation, c *orderly.Coupon) string {
	var held []string
	for _, res := range rs {
		if res.State == orderly.ReservationHeld {
			held = append(held, fmt.Sprintf("%d × %s", res.Quantity, res.SKU))
		}
	}
	d := ""
	if len(held) > 0 {
		d = fmt.Sprintf("held reservations %v", held)
	}
	if c != nil && c.State == orderly.CouponFrozen && c.OrderID == o.ID {
		if d != "" {
			d += " and "
		}
		d += "coupon " + c.ID + " frozen"
	}
	return d
}

func closedHoldsFinding(o *orderly.Order, what string) *Finding {
	return &Finding{Kind: KindClosedHolds, OrderID: o.ID,
		Detail: fmt.Sprintf("order closed (%s) still has %s", o.CloseReason, what)}
}

func scanClosedHolds(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, sinceID(since), func(tx store.Tx, after string, limit int) (int, string, error) {
		os, err := tx.ReconcileClosedHeld(ctx, after, limit)
		if err != nil {
			return 0, after, err
		}
		for _, o := range os {
			rs, err := tx.ReservationList(ctx, o.ID)
			if err != nil {
				return 0, after, err
			}
			var c *orderly.Coupon
			if o.CouponID != "" {
				if c, err = tx.CouponGet(ctx, o.CouponID); err != nil {
					return 0, after, err
				}
			}
			emit(closedHoldsFinding(o, holds(o, rs, c)))
			after = o.ID
		}
		return len(os), after, nil
	})
}

func orderClosedHolds(_ *Reconciler, s *Snapshot) []*Finding {
	if s.Order.State != orderly.StateClosed {
		return nil
	}
	if what := holds(s.Order, s.Reservations, s.Coupon); what != "" {
		return []*Finding{closedHoldsFinding(s.Order, what)}
	}
	return nil
}

// repairClosedHolds runs the close's release effects again through the order machine, the
// order's row locked, when the order still holds something.
func repairClosedHolds(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error) {
	return reapplyClose(ctx, r, f, by, func(tx store.Tx, o *orderly.Order, _ time.Time) (map[string]any, error) {
		if o.State != orderly.StateClosed {
			return nil, nil
		}
		rs, err := tx.ReservationList(ctx, o.ID)
		if err != nil {
			return nil, err
		}
		var c *orderly.Coupon
		if o.CouponID != "" {
			if c, err = tx.CouponGet(ctx, o.CouponID); err != nil {
				return nil, err
			}
		}
		if what := holds(o, rs, c); what != "" {
			return map[string]any{"released": what}, nil
		}
		return nil, nil
	})
}

// reapplyClose is the repair of a closed order whose close left work undone: in one
// transaction, the order's row locked, needed reads the order as it is now and returns the
// audit detail of what is still to do (nil: nothing, the repair is a repeat); then the
// close transition's effects run again (order.Machine.Reapply, guarded) and the repair is
// audited. It reports whether it repaired.
func reapplyClose(ctx context.Context, r *Reconciler, f *Finding, by Actor,
	needed func(tx store.Tx, o *orderly.Order, now time.Time) (map[string]any, error)) (bool, error) {
	var ok bool
	err := r.inTx(ctx, by, func(tx store.Tx, now time.Time) error {
		if _, err := tx.OrdersLock(ctx, []string{f.OrderID}); err != nil {
			return err
		}
		o, err := tx.OrderGet(ctx, f.OrderID)
		if err != nil {
			return err
		}
		detail, err := needed(tx, o, now)
		if err != nil || detail == nil {
			return err
		}
		if err := r.cfg.Machine.Reapply(ctx, tx, o, &store.OrdersTransitionParams{Now: now, Actor: by.Operator,
			Cause: "reconcile", TraceID: by.TraceID}); err != nil {
			return err
		}
		ok = true
		return audit(ctx, tx, by, f, o.ID, now, detail)
	})
	return ok, err
}

func closedPayingFinding(o *orderly.Order, now time.Time) *Finding {
	closed := ""
	if o.ClosedAt != nil {
		closed = fmt.Sprintf(" %d ms ago", now.Sub(*o.ClosedAt).Milliseconds())
	}
	return &Finding{Kind: KindClosedPaying, OrderID: o.ID, Target: o.CurrentPaymentID,
		Detail: fmt.Sprintf("order closed (%s)%s with payment %s in flight, and nothing settles the attempt at the gateway",
			o.CloseReason, closed, o.CurrentPaymentID)}
}

func scanClosedPaying(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, sinceID(since), func(tx store.Tx, after string, limit int) (int, string, error) {
		now, err := tx.Now(ctx)
		if err != nil {
			return 0, after, err
		}
		os, err := tx.ReconcileClosedPaying(ctx, now.Add(-r.cfg.StuckAfter), after, limit)
		for _, o := range os {
			emit(closedPayingFinding(o, now))
			after = o.ID
		}
		return len(os), after, err
	})
}

// closedPaying reports whether closed order o still reads paying StuckAfter after its
// close, its current attempt (among payments) still initiated, with no pending
// payment.cancel among msgs (its undelivered messages).
func (r *Reconciler) closedPaying(o *orderly.Order, payments []*orderly.Payment, msgs []*orderly.Message, now time.Time) bool {
	if o.State != orderly.StateClosed || o.PayStatus != orderly.PayPaying || o.CurrentPaymentID == "" ||
		o.ClosedAt == nil || o.ClosedAt.After(now.Add(-r.cfg.StuckAfter)) {
		return false
	}
	if !slices.ContainsFunc(payments, func(p *orderly.Payment) bool {
		return p.ID == o.CurrentPaymentID && p.State == orderly.PaymentInitiated
	}) {
		return false // settled: no money at stake (a payment.cancel corrects a failed attempt's pay_status)
	}
	for _, m := range msgs {
		if m.Topic == orderly.TopicPaymentCancel && m.Key == o.CurrentPaymentID && m.State == orderly.MessagePending {
			return false
		}
	}
	return true
}

func orderClosedPaying(r *Reconciler, s *Snapshot) []*Finding {
	if !r.closedPaying(s.Order, s.Payments, s.Messages, s.Now) {
		return nil
	}
	return []*Finding{closedPayingFinding(s.Order, s.Now)}
}

// repairClosedPaying runs the close transition's effects again through the order machine,
// the order's row locked, when the order still needs it: its cancel_payment effect writes
// the attempt's payment.cancel.
func repairClosedPaying(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error) {
	return reapplyClose(ctx, r, f, by, func(tx store.Tx, o *orderly.Order, now time.Time) (map[string]any, error) {
		if o.CurrentPaymentID == "" {
			return nil, nil
		}
		msgs, err := tx.OutboxKeyUndelivered(ctx, o.CurrentPaymentID, 100)
		if err != nil {
			return nil, err
		}
		payments, err := tx.PaymentList(ctx, o.ID)
		if err != nil || !r.closedPaying(o, payments, msgs, now) {
			return nil, err
		}
		return map[string]any{"payment_id": o.CurrentPaymentID, "done": "payment.cancel written"}, nil
	})
}

func paidUnbackedFinding(o *orderly.Order) *Finding {
	return &Finding{Kind: KindPaidUnbacked, OrderID: o.ID,
		Detail: fmt.Sprintf("order is %s with pay_status paid (amount %d %s) but no payment captured money", o.State, o.Amount, o.Currency)}
}

func scanPaidUnbacked(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, sinceID(since), func(tx store.Tx, after string, limit int) (int, string, error) {
		os, err := tx.ReconcilePaidUnbacked(ctx, after, limit)
		for _, o := range os {
			emit(paidUnbackedFinding(o))
			after = o.ID
		}
		return len(os), after, err
	})
}

func orderPaidUnbacked(_ *Reconciler, s *Snapshot) []*Finding {
	if s.Order.PayStatus != orderly.PayPaid {
		return nil
	}
	for _, p := range s.Payments {
		switch p.State {
		case orderly.PaymentSucceeded, orderly.PaymentRefundPending, orderly.PaymentRefunded:
			return nil
		}
	}
	return []*Finding{paidUnbackedFinding(s.Order)}
}

func stockFinding(l *store.StockLedger, orderID string) *Finding {
	return &Finding{Kind: KindStockMismatch, SKU: l.SKU, OrderID: orderID,
		Detail: fmt.Sprintf("counters held %d, sold %d; reservations give held %d, sold %d (available %d)",
			l.Held, l.Sold, l.LedgerHeld, l.LedgerSold, l.Available)}
}

func scanStock(ctx context.Context, r *Reconciler, _ time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, "", func(tx store.Tx, after string, limit int) (int, string, error) {
		ls, err := tx.StockLedgers(ctx, after, limit)
		for _, l := range ls {
			if !l.Agrees() {
				emit(stockFinding(l, ""))
			}
			after = l.SKU
		}
		return len(ls), after, err
	})
}

func orderStock(_ *Reconciler, s *Snapshot) []*Finding {
	var out []*Finding
	for _, l := range s.Stock {
		if !l.Agrees() {
			out = append(out, stockFinding(l, s.Order.ID))
		}
	}
	return out
}

// repairStock is an audited correction: held and sold become the ledger's figures, read
// again in the correction's transaction, guarded by the counters as read.
func repairStock(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error) {
	var ok bool
	err := r.inTx(ctx, by, func(tx store.Tx, now time.Time) error {
		l, err := tx.StockLedgerGet(ctx, f.SKU)
		if err != nil || l.Agrees() {
			return err
		}
		if ok, err = tx.StockCorrect(ctx, &store.StockCorrectParams{SKU: l.SKU, FromHeld: l.Held, FromSold: l.Sold,
			ToHeld: l.LedgerHeld, ToSold: l.LedgerSold}); err != nil || !ok {
			return err
		}
		return audit(ctx, tx, by, f, l.SKU, now, map[string]any{"before": l,
			"after": map[string]int64{"available": l.Available + (l.Held - l.LedgerHeld) + (l.Sold - l.LedgerSold),
				"held": l.LedgerHeld, "sold": l.LedgerSold}})
	})
	return ok, err
}

func overdueFinding(o *store.DueOrder, now time.Time) *Finding {
	return &Finding{Kind: KindOverdueOrder, OrderID: o.ID,
		Detail: fmt.Sprintf("order is %s past close_at %s by %d ms", o.State, o.CloseAt.Format(time.RFC3339Nano),
			now.Sub(o.CloseAt).Milliseconds())}
}

func (r *Reconciler) overdue(o *store.DueOrder, now time.Time) bool {
	before := now.Add(-r.cfg.OverdueTolerance)
	return o.CloseAt.Before(before) && o.WakeAt.Before(before)
}

func scanOverdue(ctx context.Context, r *Reconciler, since time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, sinceID(since), func(tx store.Tx, after string, limit int) (int, string, error) {
		now, err := tx.Now(ctx)
		if err != nil {
			return 0, after, err
		}
		os, err := tx.OrdersOpen(ctx, &store.OrdersOpenParams{AfterID: after, Limit: limit})
		for _, o := range os {
			if r.overdue(o, now) {
				emit(overdueFinding(o, now))
			}
			after = o.ID
		}
		return len(os), after, err
	})
}

func orderOverdue(r *Reconciler, s *Snapshot) []*Finding {
	if s.Open == nil || !r.overdue(s.Open, s.Now) {
		return nil
	}
	return []*Finding{overdueFinding(s.Open, s.Now)}
}

// repairOverdue runs the closer's claim-and-close pass (the same transition as the timer
// and the sweep); it is repaired when the order left its timed state meanwhile.
func repairOverdue(ctx context.Context, r *Reconciler, f *Finding, by Actor) (bool, error) {
	if r.cfg.CloseDue == nil {
		return false, nil
	}
	if err := r.cfg.CloseDue(ctx); err != nil {
		return false, err
	}
	var ok bool
	err := r.inTx(ctx, by, func(tx store.Tx, now time.Time) error {
		open, err := tx.OrdersOpen(ctx, &store.OrdersOpenParams{IDs: []string{f.OrderID}})
		if err != nil || (len(open) == 1 && r.overdue(open[0], now)) {
			return err
		}
		o, err := tx.OrderGet(ctx, f.OrderID)
		if err != nil {
			return err
		}
		ok = true
		return audit(ctx, tx, by, f, o.ID, now, map[string]any{"state": o.State, "close_reason": o.CloseReason})
	})
	return ok, err
}

func outboxFinding(k Kind, m *orderly.Message, orderID string, now time.Time) *Finding {
	what := "dead"
	if k == KindOutboxStuck {
		what = fmt.Sprintf("pending, due %d ms ago", now.Sub(m.NextAttemptAt).Milliseconds())
	}
	return &Finding{Kind: k, OrderID: orderID, Target: strconv.FormatInt(m.ID, 10),
		Detail: fmt.Sprintf("message %d (%s, key %s) is %s after %d attempts: %s", m.ID, m.Topic, m.Key, what, m.Attempts, m.LastError)}
}

func scanOutboxDead(ctx context.Context, r *Reconciler, _ time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, int64(0), func(tx store.Tx, after int64, limit int) (int, int64, error) {
		ms, err := tx.OutboxDeadList(ctx, &store.OutboxFilter{AfterID: after, Limit: limit})
		for _, m := range ms {
			emit(outboxFinding(KindOutboxDead, m, "", time.Time{}))
			after = m.ID
		}
		return len(ms), after, err
	})
}

func scanOutboxStuck(ctx context.Context, r *Reconciler, _ time.Time, emit func(*Finding)) (int64, error) {
	return Pages(ctx, r, int64(0), func(tx store.Tx, after int64, limit int) (int, int64, error) {
		now, err := tx.Now(ctx)
		if err != nil {
			return 0, after, err
		}
		ms, err := tx.OutboxStuckList(ctx, now.Add(-r.cfg.StuckAfter), after, limit)
		for _, m := range ms {
			emit(outboxFinding(KindOutboxStuck, m, "", now))
			after = m.ID
		}
		return len(ms), after, err
	})
}

func orderOutbox(k Kind) func(r *Reconciler, s *Snapshot) []*Finding {
	return func(r *Reconciler, s *Snapshot) []*Finding {
		var out []*Finding
		for _, m := range s.Messages {
			switch {
			case k == KindOutboxDead && m.State == orderly.MessageDead,
				k == KindOutboxStuck && m.State == orderly.MessagePending && m.NextAttemptAt.Before(s.Now.Add(-r.cfg.StuckAfter)):
				out = append(out, outboxFinding(k, m, s.Order.ID, s.Now))
			}
		}
		return out
	}
}
