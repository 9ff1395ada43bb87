package store

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
)

// GroupTx holds the queries of group-buy deals, groups and their members (package
// groupbuy). It is part of Tx.
//
// Lock order (docs/flows/group-buy.md): a transaction that changes a group locks the group
// row (GroupLock, GroupsLockByOrders, GroupsDue) before any order row of it. Giving up a
// seat (GroupMembersFree) changes only the member row, never the group row, so that the
// close of one unpaid member order, which holds the order row, never waits for its group.
type GroupTx interface {
	// DealInsert writes a deal. ECONFLICT when the id exists.
	DealInsert(ctx context.Context, d *orderly.Deal) error
	// DealGet returns a deal; ENOTFOUND if there is none.
	DealGet(ctx context.Context, id string) (*orderly.Deal, error)

	// GroupInsert writes a group (Members are not written). A forming group waits on its
	// deadline: wake_at = deadline_at; otherwise wake_at is NULL.
	GroupInsert(ctx context.Context, g *orderly.Group) error
	// GroupGet returns a group with SeatsTaken counted and without Members; ENOTFOUND if
	// there is none.
	GroupGet(ctx context.Context, id string) (*orderly.Group, error)
	// GroupLock locks a group's row until the transaction ends (where the dialect has row
	// locks; SQLite has one writer) and returns it as GroupGet does; ENOTFOUND if there is
	// none.
	GroupLock(ctx context.Context, id string) (*orderly.Group, error)
	// GroupsLockByOrders locks, in id order, the groups of which the orders are members and
	// returns their ids; orders that are no group's member are ignored. It locks no member
	// or order row.
	GroupsLockByOrders(ctx context.Context, orderIDs []string) ([]string, error)
	// GroupAddPaid adds delta to a group's paid_members, guarded: the group is in one of
	// states and the count stays within 0 … max_members. It reports whether the row changed.
	GroupAddPaid(ctx context.Context, id string, delta int64, states []orderly.GroupState) (bool, error)
	// GroupSetState is the guarded state change of a group (forming → succeeded | failed):
	// it sets succeeded_at or failed_at to At, clears wake_at, bumps version and reports
	// whether the row changed.
	GroupSetState(ctx context.Context, params *GroupSetStateParams) (bool, error)
	// GroupsDue claims up to Limit forming groups whose wake_at <= Now, earliest first,
	// locking them where the dialect can (FOR UPDATE SKIP LOCKED).
	GroupsDue(ctx context.Context, now time.Time, limit int) ([]*DueGroup, error)
	// GroupList returns up to params.Limit groups with id > params.AfterID, by id (keyset
	// pagination), each as GroupGet returns it and with its Members as GroupMembers returns
	// them. It locks nothing; verify reads every group through it.
	GroupList(ctx context.Context, params *ListParams) ([]*orderly.Group, error)
	// GroupNextWakeAt returns the earliest wake_at among forming groups; ok=false if none.
	GroupNextWakeAt(ctx context.Context) (wakeAt time.Time, ok bool, err error)
	// GroupsOverdueCount counts forming groups whose wake_at is before before.
	GroupsOverdueCount(ctx context.Context, before time.Time) (int64, error)
	// GroupMembersFailing returns those of the orders that are members of a group still
	// forming whose deadline_at <= now: a group the close path is about to fail, whose
	// failure outranks their own payment deadlines. It is a plain read and locks nothing.
	GroupMembersFailing(ctx context.Context, orderIDs []string, now time.Time) ([]string, error)

	// GroupMemberInsert writes a member holding a seat (LeftAt nil). ECONFLICT when the
	// user already holds a seat in the group or the order is a member already.
	GroupMemberInsert(ctx context.Context, m *orderly.GroupMember) error
	// GroupMembers returns a group's members with their orders' state and pay_status, by
	// joined_at then order id.
	GroupMembers(ctx context.Context, groupID string) ([]*orderly.GroupMember, error)
	// GroupMemberByOrder returns the member that an order is; ENOTFOUND if it is none.
	GroupMemberByOrder(ctx context.Context, orderID string) (*orderly.GroupMember, error)
	// GroupMemberSeat returns the member through which userID holds a seat in a group;
	// ENOTFOUND if the user holds none.
	GroupMemberSeat(ctx context.Context, groupID, userID string) (*orderly.GroupMember, error)
	// GroupMembersFree gives up the seats of the members that the orders are, at at
	// (left_at), guarded: only seats still held change. It returns how many changed.
	GroupMembersFree(ctx context.Context, orderIDs []string, at time.Time) (int64, error)
}

// GroupSetStateParams is the input of Tx.GroupSetState.
type GroupSetStateParams struct {
	ID   string
	From orderly.GroupState // guard
	To   orderly.GroupState
	At   time.Time // succeeded_at or failed_at
}

// DueGroup is a forming group whose deadline passed, as the close path claims it.
type DueGroup struct {
	ID         string
	DealID     string
	DeadlineAt time.Time
}
