package groupbuy

import (
	"context"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// Effects returns the effects that Flow names and package groupbuy implements; give them
// to order.NewMachine at the composition root.
func Effects() map[string]order.Effect {
	return map[string]order.Effect{
		EffectLockGroup: func(ctx context.Context, tx store.Tx, b *order.EffectBatch) error {
			_, err := tx.GroupsLockByOrders(ctx, b.IDs)
			return err
		},
		EffectMemberPaid: memberPaid,
		EffectSeatFree: func(ctx context.Context, tx store.Tx, b *order.EffectBatch) error {
			_, err := tx.GroupMembersFree(ctx, b.IDs, b.Params.Now)
			return err
		},
	}
}

// memberPaid is EffectMemberPaid. The group row was locked before the order rows
// (EffectLockGroup), so the payments of one group are counted one at a time: exactly one
// of them sees the count reach min_members, and the failure at the deadline, which locks
// the group first too, sees either no success or the whole of it.
//
// The success is decided, and dated, on the database clock read with the group row held,
// not at the transition's Now (read before this transaction waited for the group): a
// leave or a failure that took the group first is then always dated before the success
// it preceded, never after it.
func memberPaid(ctx context.Context, tx store.Tx, b *order.EffectBatch) error {
	for _, id := range b.IDs {
		m, err := tx.GroupMemberByOrder(ctx, id)
		if err != nil {
			return fmt.Errorf("group of order %s: %w", id, err)
		}
		g, err := tx.GroupLock(ctx, m.GroupID)
		if err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if now.Before(b.Params.Now) {
			now = b.Params.Now // never before the payment it counts
		}
		if ok, err := tx.GroupAddPaid(ctx, g.ID, 1, []orderly.GroupState{g.State}); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("count the payment of order %s in group %s: %d paid of %d seats", id, g.ID, g.PaidMembers, g.MaxMembers)
		}
		switch g.State {
		case orderly.GroupForming:
			if g.PaidMembers+1 < g.MinMembers || !now.Before(g.DeadlineAt) {
				continue // not yet; or the deadline passed and the group is about to fail
			}
			if err := succeed(ctx, tx, b, g, now); err != nil {
				return err
			}
		case orderly.GroupSucceeded:
			if err := move(ctx, tx, b, now, []string{id}, EventGroupSucceed, "group "+g.ID+" succeeded before this payment"); err != nil {
				return err
			}
		case orderly.GroupFailed:
			// The failure closes every unpaid member under the group lock that this payment
			// took first, so this order could not still be pending; refund it all the same,
			// restocking its units: they are committed here, ahead of the transition's own
			// commit effect (which then finds nothing held), for the refund to count them.
			if _, err := tx.ReservationsCommit(ctx, id, b.Params.Now); err != nil {
				return err
			}
			if err := move(ctx, tx, b, now, []string{id}, EventGroupFail, "group "+g.ID+" failed before this payment"); err != nil {
				return err
			}
		}
	}
	return nil
}

// succeed moves forming group g (locked) to succeeded at now and all its paid members to
// group_succeeded, in tx.
func succeed(ctx context.Context, tx store.Tx, b *order.EffectBatch, g *orderly.Group, now time.Time) error {
	if ok, err := tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: g.ID, From: orderly.GroupForming, To: orderly.GroupSucceeded, At: now}); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("group %s changed under its lock", g.ID)
	}
	members, err := tx.GroupMembers(ctx, g.ID)
	if err != nil {
		return err
	}
	var paid []string
	for _, m := range members {
		if m.OrderState == orderly.StatePaid {
			paid = append(paid, m.OrderID)
		}
	}
	if int64(len(paid)) != g.PaidMembers+1 {
		return fmt.Errorf("group %s counts %d paid members, %d member orders are paid", g.ID, g.PaidMembers+1, len(paid))
	}
	return move(ctx, tx, b, now, paid, EventGroupSucceed, fmt.Sprintf("group %s reached %d paid members of %d before its deadline", g.ID, len(paid), g.MinMembers))
}

// move fires event on the paid member orders ids at now through the machine; each must
// change.
func move(ctx context.Context, tx store.Tx, b *order.EffectBatch, now time.Time, ids []string, event orderly.Event, cause string) error {
	changed, err := b.Machine.Transition(ctx, tx, b.Flow, &store.OrdersTransitionParams{
		IDs: ids, From: orderly.StatePaid, Event: event, Now: now,
		Cause: cause, Actor: b.Params.Actor, TraceID: b.Params.TraceID,
	}, nil)
	if err != nil {
		return err
	} else if len(changed) != len(ids) {
		return fmt.Errorf("%s: %d of %d paid member orders changed", event, len(changed), len(ids))
	}
	return nil
}
