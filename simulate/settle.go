package simulate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// settlePoll is the pause between two settle passes.
const settlePoll = 250 * time.Millisecond

// settle has every driver read what has not settled until all are at rest and (with a
// Store) the outbox drained; at most until Drain after the latest deadline of any flow.
func (r *runner) settle(ctx context.Context) {
	last := time.Now()
	for _, d := range r.drivers {
		if dl := d.LastDeadline(); dl.After(last) {
			last = dl
		}
	}
	deadline := last.Add(r.cfg.Drain)
	for {
		done := true
		for _, d := range r.drivers {
			done = d.Settle(ctx, r) && done
		}
		outboxDone := r.outboxDrained(ctx)
		if ctx.Err() != nil || (done && outboxDone) || time.Now().After(deadline) {
			return
		}
		if sleepUntil(ctx, time.Now().Add(settlePoll)) != nil {
			return
		}
	}
}

// outboxDrained reports whether the Store's outbox has no pending message; true without a
// Store.
func (r *runner) outboxDrained(ctx context.Context) bool {
	if r.cfg.Store == nil {
		return true
	}
	var pending int64
	err := r.cfg.Store.Read(ctx, func(tx store.Tx) error {
		counts, err := tx.OutboxCounts(ctx)
		pending = counts[orderly.MessagePending]
		return err
	})
	return err == nil && pending == 0
}

// unchanged reads order o again and reports whether it reads as before: same version,
// state, pay_status and refunded_amount. A driver reads an order, then its payments and
// refunds, in separate requests; whatever the server did in between (the relay applying a
// refund the gateway confirmed: refund succeeded and pay_status partially_refunded in one
// transaction) shows in the later reads but not in the order read first. Such readings do
// not fit together, so the order is not taken as settled on them: the next settle pass
// reads all of them again. A server that leaves the order as it is (pay_status never
// moved after a confirmed refund) reads the same and is checked as read.
func (r *runner) unchanged(ctx context.Context, o *orderly.Order) bool {
	again, err := r.c.order(ctx, o.ID)
	if err != nil {
		if ctx.Err() == nil {
			r.httpProblem("read order %s: %v", o.ID, err)
		}
		return false
	}
	return again.Version == o.Version && again.State == o.State && again.PayStatus == o.PayStatus &&
		again.RefundedAmount == o.RefundedAmount
}

// evaluate has every driver turn what it read into the Result (counts, lateness samples,
// violations), then adds what the run checks for all flows: lateness percentiles, the
// gateway's ledger, the created share, and the unexpected answers and refusals.
func (r *runner) evaluate() *Result {
	res := &Result{
		Violations: []string{},
		Behaviours: map[string]int{},
		Rejected:   map[string]int{orderly.EOUTOFSTOCK: 0, orderly.ECOUPONUNAVAIL: 0},
		Targets:    len(r.c.targets),
		Retries:    int(r.c.retries.Load()),
	}
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	for _, d := range r.drivers {
		d.Check(r, res)
	}
	res.Lateness = newPercentiles(res.lateness)
	res.QueueWait = r.c.queueWait()
	if r.cfg.GatewayLedger != nil {
		res.Violations = append(res.Violations, r.checkRefundLedger(r.cfg.GatewayLedger())...)
	}
	if share := r.cfg.MinCreatedShare; share > 0 && res.Sent > 0 && float64(res.Orders) < share*float64(res.Sent) {
		violate("refused: the server created %d of the %d orders sent (%.1f %%), below the minimum share %.1f %%",
			res.Orders, res.Sent, 100*float64(res.Orders)/float64(res.Sent), 100*share)
	}
	if share := r.cfg.MinPaidShare; share > 0 && res.Payers > 0 && float64(res.PayersPaid) < share*float64(res.Payers) {
		violate("payments: %d of the %d buyers who paid in time ended paid (%.1f %%), below the minimum share %.1f %%: "+
			"the run barely tested payments (%d buyers reached the server after their deadline; request slot wait p50 %s, p99 %s)",
			res.PayersPaid, res.Payers, 100*float64(res.PayersPaid)/float64(res.Payers), 100*share,
			res.MissedDeadline, ms(res.QueueWait.P50), ms(res.QueueWait.P99))
	}
	res.Clock = r.clock
	res.NearDeadline.WindowMS = float64(NearDeadlineWindow / time.Millisecond)

	r.mu.Lock()
	res.Violations = append(res.Violations, r.httpProblems...)
	if r.httpDropped > 0 {
		violate("HTTP: … and %d more unexpected answers", r.httpDropped)
	}
	res.Violations = append(res.Violations, r.refusals...)
	if r.refusalsLeft > 0 {
		violate("refused: … and %d more refusals the plan does not explain", r.refusalsLeft)
	}
	r.mu.Unlock()

	res.Created = res.Orders
	res.Rejected[orderly.EOUTOFSTOCK] = res.OutOfStock
	res.Rejected[orderly.ECOUPONUNAVAIL] = res.CouponUnavailable
	if !r.sendStart.IsZero() {
		res.SendS = time.Unix(0, r.lastCreated.Load()).Sub(r.sendStart).Seconds()
	}
	if res.SendS > 0 {
		res.OrdersPerS = float64(res.Created) / res.SendS
	}
	res.DurationS = time.Since(r.begin).Seconds()
	return res
}

// verify runs verify.Check on the Store and adds its findings to res.
func (r *runner) verify(ctx context.Context, res *Result) error {
	rep, err := verify.Check(ctx, r.cfg.Store, verify.Options{InitialStock: r.initial, RequireDrained: true, Flows: r.cfg.VerifyFlows,
		Groups: verify.ReadGroups, Holds: sim.ReadHolds})
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	res.Verify = rep
	for _, v := range rep.Violations {
		inv, rest, _ := strings.Cut(v, ": ")
		res.Violations = append(res.Violations, inv+" (database): "+rest)
	}
	if rep.ViolationsOmitted > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("database: … and %d more violations", rep.ViolationsOmitted))
	}
	return nil
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "(no closed_at)"
	}
	return formatTime(*t)
}

// checkRefundLedger checks the gateway's ledger against the final payments of every flow
// (I2, I3): each
// refunded payment was refunded exactly once at the gateway, for its amount; no other
// payment was refunded at all. A refund call replayed with the same idempotency key moves
// no money and is not counted.
func (r *runner) checkRefundLedger(ledger []sim.GatewayCall) []string {
	refunds := map[string][]sim.GatewayCall{}
	for _, c := range ledger {
		if c.Op == sim.GatewayRefund && !c.Replay && !r.isRefundKey(c.IdempotencyKey) {
			refunds[c.PaymentID] = append(refunds[c.PaymentID], c)
		}
	}
	var out []string
	for _, d := range r.drivers {
		payments, _ := d.Payments()
		for _, fp := range payments {
			p := fp.Payment
			got := refunds[p.ID]
			delete(refunds, p.ID)
			var sum int64
			for _, c := range got {
				sum += c.Amount
			}
			switch {
			case p.State == orderly.PaymentRefunded && (len(got) != 1 || sum != p.Amount):
				out = append(out, fmt.Sprintf("I3: payment %s of order %s (%s) is refunded, and the gateway refunded it %d times for %d in all, want once for %d",
					p.ID, fp.OrderID, fp.Who, len(got), sum, p.Amount))
			case p.State != orderly.PaymentRefunded && p.State != orderly.PaymentRefundPending && len(got) > 0:
				out = append(out, fmt.Sprintf("I2: payment %s of order %s (%s) is %s, but the gateway refunded it %d times for %d",
					p.ID, fp.OrderID, fp.Who, p.State, len(got), sum))
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(refunds)) {
		out = append(out, fmt.Sprintf("I2: the gateway refunded payment %s %d times, but no order of the run has that payment", id, len(refunds[id])))
	}
	return out
}

// refundCalls returns the gateway's refund calls by idempotency key, read once from
// Config.GatewayLedger (after the run settled).
func (r *runner) refundCalls() map[string][]sim.GatewayCall {
	r.ledgerOnce.Do(func() {
		r.ledgerByKey = map[string][]sim.GatewayCall{}
		for _, c := range r.cfg.GatewayLedger() {
			if c.Op == sim.GatewayRefund {
				r.ledgerByKey[c.IdempotencyKey] = append(r.ledgerByKey[c.IdempotencyKey], c)
			}
		}
	})
	return r.ledgerByKey
}

// isRefundKey reports whether a gateway idempotency key is the id of a merchant refund of
// the run (checked by its flow, not as a payment's refund).
func (r *runner) isRefundKey(key string) bool {
	r.refundIDsOnce.Do(func() {
		r.refundIDs = map[string]bool{}
		for _, d := range r.drivers {
			_, ids := d.Payments()
			for _, id := range ids {
				r.refundIDs[id] = true
			}
		}
	})
	return r.refundIDs[key]
}
