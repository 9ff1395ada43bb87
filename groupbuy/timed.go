package groupbuy

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/timeout"
)

// Deadlines are the group deadlines as a timed kind of the close path (timeout.Timed): the
// closer's timer, sweep and deep check fail the forming groups whose deadline passed on
// the database clock. Give it to timeout.Config.Timed.
type Deadlines struct {
	machine *order.Machine
	flow    *orderly.Flow
	metrics *telemetry.Metrics
	logger  *slog.Logger
}

var _ timeout.Timed = (*Deadlines)(nil)

// NewDeadlines returns the group deadlines of the groups whose member orders machine
// moves; it returns an error when machine has no group_buy flow.
func NewDeadlines(machine *order.Machine, metrics *telemetry.Metrics, logger *slog.Logger) (*Deadlines, error) {
	flow, err := machine.Flow(FlowName)
	if err != nil {
		return nil, fmt.Errorf("groupbuy: %w", err)
	}
	return &Deadlines{machine: machine, flow: flow, metrics: telemetry.OrDefault(metrics), logger: cmp.Or(logger, slog.Default())}, nil
}

// Name implements timeout.Timed.
func (d *Deadlines) Name() string { return "group" }

// NextWakeAt implements timeout.Timed: the earliest deadline of a forming group.
func (d *Deadlines) NextWakeAt(ctx context.Context, tx store.Tx) (time.Time, bool, error) {
	return tx.GroupNextWakeAt(ctx)
}

// OverdueCount implements timeout.Timed.
func (d *Deadlines) OverdueCount(ctx context.Context, tx store.Tx, before time.Time) (int64, error) {
	return tx.GroupsOverdueCount(ctx, before)
}

// FireDue implements timeout.Timed: it claims up to limit forming groups past their
// deadline (SKIP LOCKED) and fails each in tx (Fail).
func (d *Deadlines) FireDue(ctx context.Context, tx store.Tx, now time.Time, limit int, trigger string) (claimed, fired int, err error) {
	due, err := tx.GroupsDue(ctx, now, limit)
	if err != nil {
		return 0, 0, err
	}
	for _, g := range due {
		ok, err := d.fail(ctx, tx, g.ID, now, trigger)
		if err != nil {
			return len(due), fired, err
		}
		if ok {
			fired++
			d.metrics.GroupLateness.Observe(now.Sub(g.DeadlineAt).Seconds())
		}
	}
	return len(due), fired, nil
}

// fail fails forming group id, locked by the caller: the group becomes failed (failed_at
// = now), its unpaid member orders close (group_failed: stock and coupon released), then
// its paid members move to group_failed, which requests their full refund (restocking)
// and moves them on to refunding; all in tx, through the machine. Unpaid members go first:
// their closes take no stock row before every unpaid order row is held, so a timeout
// close of one of them, which holds its order row and then waits for stock, never waits
// for this transaction while it waits for that order.
func (d *Deadlines) fail(ctx context.Context, tx store.Tx, id string, now time.Time, trigger string) (bool, error) {
	ok, err := tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: id, From: orderly.GroupForming, To: orderly.GroupFailed, At: now})
	if err != nil || !ok {
		return false, err
	}
	members, err := tx.GroupMembers(ctx, id)
	if err != nil {
		return false, err
	}
	var (
		unpaid, paid []string
		coupons      = map[string]string{}
	)
	for _, m := range members {
		switch m.OrderState {
		case orderly.StatePendingPayment:
			o, err := tx.OrderGet(ctx, m.OrderID)
			if err != nil {
				return false, err
			}
			unpaid = append(unpaid, o.ID)
			if o.CouponID != "" {
				coupons[o.ID] = o.CouponID
			}
		case orderly.StatePaid:
			paid = append(paid, m.OrderID)
		}
	}
	cause := fmt.Sprintf("group %s failed: deadline %s passed with fewer than its minimum paid members", id, now.Format(time.RFC3339Nano))
	if len(unpaid) > 0 {
		if _, err := d.machine.Transition(ctx, tx, d.flow, &store.OrdersTransitionParams{
			IDs: unpaid, From: orderly.StatePendingPayment, Event: EventGroupFail, Now: now,
			CloseReason: CloseReasonGroupFailed, Cause: cause, Actor: trigger,
		}, coupons); err != nil {
			return false, err
		}
	}
	if len(paid) > 0 {
		changed, err := d.machine.Transition(ctx, tx, d.flow, &store.OrdersTransitionParams{
			IDs: paid, From: orderly.StatePaid, Event: EventGroupFail, Now: now, Cause: cause, Actor: trigger,
		}, nil)
		if err != nil {
			return false, err
		} else if len(changed) != len(paid) {
			return false, fmt.Errorf("fail group %s: %d of %d paid member orders changed", id, len(changed), len(paid))
		}
	}
	d.logger.InfoContext(ctx, "group failed at its deadline", "group_id", id, "unpaid_closed", len(unpaid), "paid_refunded", len(paid), "trigger", trigger)
	return true, nil
}
