package groupbuy

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Deadlines are the group deadlines as a timed kind of the close path (closer.Timed): the
// closer's timer, sweep and deep check fail the forming groups whose deadline passed on
// the database clock. Give it to closer.Config.Timed.
type Deadlines struct {
	machine *order.Machine
	flow    *orderly.Flow
	metrics *telemetry.Metrics
	logger  *slog.Logger
}

var _ closer.Timed = (*Deadlines)(nil)

// NewDeadlines returns the group deadlines of the groups whose member orders machine
// moves; it returns an error when machine has no group_buy flow.
func NewDeadlines(machine *order.Machine, metrics *telemetry.Metrics, logger *slog.Logger) (*Deadlines, error) {
	flow, err := machine.Flow(FlowName)
	if err != nil {
		return nil, fmt.Errorf("groupbuy: %w", err)
	}
	return &Deadlines{machine: machine, flow: flow, metrics: telemetry.OrDefault(metrics), logger: cmp.Or(logger, slog.Default())}, nil
}

var _ closer.Outranking = (*Deadlines)(nil)

// Outranked implements closer.Outranking: a member whose payment deadline is the group's
// (it joined late) falls due at the same instant as the group; the group's deadline
// outranks its own (docs/flows/group-buy.md), so it is left to the group's failure, which
// closes it group_failed and keeps its seat, instead of closing payment_timeout.
func (d *Deadlines) Outranked(ctx context.Context, tx store.Tx, due []*store.DueOrder, now time.Time) ([]string, error) {
	var members []string
	for _, o := range due {
		if o.Flow == d.flow.Name {
			members = append(members, o.ID)
		}
	}
	if len(members) == 0 {
		return nil, nil
	}
	return tx.GroupMembersFailing(ctx, members, now)
}

// Name implements closer.Timed.
func (d *Deadlines) Name() string { return "group" }

// NextWakeAt implements closer.Timed: the earliest deadline of a forming group.
func (d *Deadlines) NextWakeAt(ctx context.Context, tx store.Tx) (time.Time, bool, error) {
	return tx.GroupNextWakeAt(ctx)
}

// OverdueCount implements closer.Timed.
func (d *Deadlines) OverdueCount(ctx context.Context, tx store.Tx, before time.Time) (int64, error) {
	return tx.GroupsOverdueCount(ctx, before)
}

// FireDue implements closer.Timed: it claims up to limit forming groups past their
// deadline (SKIP LOCKED) and fails them all in tx.
//
// Lock order (docs/flows/group-buy.md): the claim holds the group rows; every member order
// that will move is locked next, all groups' at once and in id order (OrdersLock); the
// stock rows and coupons are taken last: the transitions defer their releases
// (order.DeferEffects), applied once for the whole batch, in SKU order, as the
// transaction's last statements. Failing the groups one after the other before locking
// their orders would hold the deal's stock row after the first group and then wait for
// the member orders of the next, which a timeout close of those orders (holding them and
// waiting for that stock row) never gives up: a deadlock. Releasing each group's stock as
// it fails held the batch's deals' stock rows, which every join and payment of those
// deals needs, for the rest of the batch (tens of statements per group): on a PostgreSQL
// cluster joins queued behind it for seconds.
func (d *Deadlines) FireDue(ctx context.Context, tx store.Tx, now time.Time, limit int, trigger string) (claimed, fired int, err error) {
	due, err := tx.GroupsDue(ctx, now, limit)
	if err != nil {
		return 0, 0, err
	}
	var (
		failing []*failingGroup
		moving  []string
	)
	for _, g := range due {
		fg, err := d.prepare(ctx, tx, g, now)
		if err != nil {
			return len(due), 0, err
		}
		if fg != nil {
			failing = append(failing, fg)
			moving = append(append(moving, fg.unpaid...), fg.paid...)
		}
	}
	if _, err := tx.OrdersLock(ctx, moving); err != nil {
		return len(due), 0, err
	}
	ctx, releases := order.DeferEffects(ctx, orderly.EffectReleaseReservations, orderly.EffectReleaseCoupon)
	for _, fg := range failing {
		if err := d.fail(ctx, tx, fg, now, trigger); err != nil {
			return len(due), 0, err
		}
	}
	if err := releases.Flush(ctx, tx); err != nil {
		return len(due), 0, err
	}
	for _, fg := range failing {
		d.metrics.GroupLateness.Observe(now.Sub(fg.deadlineAt).Seconds())
	}
	return len(due), len(failing), nil
}

// failingGroup is a group moved to failed in this transaction and the member orders its
// failure moves.
type failingGroup struct {
	id         string
	deadlineAt time.Time
	unpaid     []string          // pending_payment member orders: closed (group_failed)
	paid       []string          // paid member orders: group_failed, refunded
	coupons    map[string]string // coupon ids of the unpaid orders, by order id
}

// prepare moves forming group g, claimed by the caller, to failed (failed_at = now) and
// reads the member orders its failure moves; nil when the group was not forming.
func (d *Deadlines) prepare(ctx context.Context, tx store.Tx, g *store.DueGroup, now time.Time) (*failingGroup, error) {
	ok, err := tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: g.ID, From: orderly.GroupForming, To: orderly.GroupFailed, At: now})
	if err != nil || !ok {
		return nil, err
	}
	members, err := tx.GroupMembers(ctx, g.ID)
	if err != nil {
		return nil, err
	}
	fg := &failingGroup{id: g.ID, deadlineAt: g.DeadlineAt, coupons: map[string]string{}}
	for _, m := range members {
		switch m.OrderState {
		case orderly.StatePendingPayment:
			o, err := tx.OrderGet(ctx, m.OrderID)
			if err != nil {
				return nil, err
			}
			fg.unpaid = append(fg.unpaid, o.ID)
			if o.CouponID != "" {
				fg.coupons[o.ID] = o.CouponID
			}
		case orderly.StatePaid:
			fg.paid = append(fg.paid, m.OrderID)
		}
	}
	return fg, nil
}

// fail moves the member orders of a failed group, their rows locked by the caller: the
// unpaid ones close (group_failed: stock and coupon released), the paid ones move to
// group_failed, which requests their full refund (restocking) and moves them on to
// refunding; all in tx, through the machine. An unpaid order closed meanwhile (its own
// payment deadline) is skipped by the transition's guard; a paid one cannot move, as
// leaving and paying lock the group first.
func (d *Deadlines) fail(ctx context.Context, tx store.Tx, fg *failingGroup, now time.Time, trigger string) error {
	cause := fmt.Sprintf("group %s failed: deadline %s passed with fewer than its minimum paid members", fg.id, now.Format(time.RFC3339Nano))
	if len(fg.unpaid) > 0 {
		if _, err := d.machine.Transition(ctx, tx, d.flow, &store.OrdersTransitionParams{
			IDs: fg.unpaid, From: orderly.StatePendingPayment, Event: EventGroupFail, Now: now,
			CloseReason: CloseReasonGroupFailed, Cause: cause, Actor: trigger,
		}, fg.coupons); err != nil {
			return err
		}
	}
	if len(fg.paid) > 0 {
		changed, err := d.machine.Transition(ctx, tx, d.flow, &store.OrdersTransitionParams{
			IDs: fg.paid, From: orderly.StatePaid, Event: EventGroupFail, Now: now, Cause: cause, Actor: trigger,
		}, nil)
		if err != nil {
			return err
		} else if len(changed) != len(fg.paid) {
			return fmt.Errorf("fail group %s: %d of %d paid member orders changed", fg.id, len(changed), len(fg.paid))
		}
	}
	d.logger.InfoContext(ctx, "group failed at its deadline", "group_id", fg.id, "unpaid_closed", len(fg.unpaid), "paid_refunded", len(fg.paid), "trigger", trigger)
	return nil
}
