package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const dealColumns = `id, sku, group_price, currency, min_members, max_members, group_time_limit_ms,
	member_payment_timeout_ms, created_at`

// groupColumns are the columns of an orderly.Group, with the seats still held counted.
const groupColumns = `g.id, g.deal_id, g.state, g.leader_user_id, g.min_members, g.max_members, g.deadline_at,
	g.created_at, g.succeeded_at, g.failed_at, g.paid_members, g.version, g.metadata,
	(SELECT COUNT(*) FROM group_members m WHERE m.group_id = g.id AND m.left_at IS NULL)`

const memberColumns = `m.group_id, m.user_id, m.order_id, o.state, o.pay_status, m.joined_at, m.left_at`

var (
	qDealInsert  = sqlText(`INSERT INTO deals (` + dealColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qDealGet     = sqlText(`SELECT ` + dealColumns + ` FROM deals WHERE id = ?`)
	qGroupInsert = sqlText(`INSERT INTO deal_groups (id, deal_id, state, leader_user_id, min_members, max_members,
		deadline_at, wake_at, created_at, succeeded_at, failed_at, paid_members, version, metadata)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qGroupGet  = sqlText(`SELECT ` + groupColumns + ` FROM deal_groups g WHERE g.id = ?`)
	qGroupList = sqlText(`SELECT ` + groupColumns + ` FROM deal_groups g WHERE g.id > ? ORDER BY g.id LIMIT ?`)
	// qGroupListMembers reads the members of a page of groups: those of the ids in
	// (after, last], the page's range.
	qGroupListMembers = sqlText(`SELECT ` + memberColumns + ` FROM group_members m JOIN orders o ON o.id = m.order_id
		WHERE m.group_id > ? AND m.group_id <= ? ORDER BY m.group_id, m.joined_at, m.order_id`)
	qGroupLock = newQuery(func(d *dialect) string {
		return `SELECT id FROM deal_groups WHERE id = ?` + d.lockRows
	})
	// qGroupIDsOfOrders is a plain read: it locks no member row (see store.GroupTx).
	qGroupIDsOfOrders = newQuery(func(d *dialect) string {
		return `SELECT DISTINCT group_id FROM group_members WHERE order_id IN (` + d.ids + `)`
	})
	// qGroupMembersFailing is a plain read, as qGroupIDsOfOrders.
	qGroupMembersFailing = newQuery(func(d *dialect) string {
		return `SELECT m.order_id FROM group_members m JOIN deal_groups g ON g.id = m.group_id
			WHERE m.order_id IN (` + d.ids + `) AND g.state = 'forming' AND g.deadline_at <= ? ORDER BY m.order_id`
	})
	qGroupsLock = newQuery(func(d *dialect) string {
		return d.selectByIDs("deal_groups.id", "deal_groups", "id", d.ids, "1 = 1", ` ORDER BY deal_groups.id`+d.lockRows)
	})
	qGroupAddPaid = sqlText(`UPDATE deal_groups SET paid_members = paid_members + ?, version = version + 1
		WHERE id = ? AND state IN (` + stateIn + `) AND paid_members + ? >= 0 AND paid_members + ? <= max_members`)
	qGroupSetState = sqlText(`UPDATE deal_groups SET state = ?, wake_at = NULL, version = version + 1,
		succeeded_at = CASE WHEN ? = 'succeeded' THEN ? ELSE succeeded_at END,
		failed_at = CASE WHEN ? = 'failed' THEN ? ELSE failed_at END
		WHERE id = ? AND state = ?`)
	qGroupsDue = newQuery(func(d *dialect) string {
		return `SELECT id, deal_id, deadline_at FROM deal_groups` + d.forceIndex("deal_groups_wake_at") + `
			WHERE wake_at <= ? ORDER BY wake_at LIMIT ?` + d.skipLocked
	})
	qGroupNextWakeAt    = sqlText(`SELECT MIN(wake_at) FROM deal_groups WHERE wake_at IS NOT NULL`)
	qGroupsOverdueCount = sqlText(`SELECT COUNT(*) FROM deal_groups WHERE wake_at < ?`)
	qGroupMemberInsert  = sqlText(`INSERT INTO group_members (order_id, group_id, user_id, seat_user_id, joined_at, left_at) VALUES (?, ?, ?, ?, ?, NULL)`)
	qGroupMembers       = sqlText(`SELECT ` + memberColumns + ` FROM group_members m JOIN orders o ON o.id = m.order_id WHERE m.group_id = ? ORDER BY m.joined_at, m.order_id`)
	qGroupMemberByOrder = sqlText(`SELECT ` + memberColumns + ` FROM group_members m JOIN orders o ON o.id = m.order_id WHERE m.order_id = ?`)
	qGroupMemberSeat    = sqlText(`SELECT ` + memberColumns + ` FROM group_members m JOIN orders o ON o.id = m.order_id WHERE m.group_id = ? AND m.seat_user_id = ?`)
	qGroupMembersFree   = newQuery(func(d *dialect) string {
		return d.updateByIDs("group_members", "order_id", d.ids, `left_at = ?, seat_user_id = NULL`, `left_at IS NULL`)
	})
)

// DealInsert implements store.Tx.
func (t *tx) DealInsert(ctx context.Context, d *orderly.Deal) error {
	_, err := t.exec(ctx, "deal "+d.ID, qDealInsert, d.ID, d.SKU, d.GroupPrice, d.Currency, d.MinMembers, d.MaxMembers,
		d.GroupTimeLimitSeconds*1000, d.MemberPaymentTimeoutSeconds*1000, ms(d.CreatedAt))
	return err
}

// DealGet implements store.Tx.
func (t *tx) DealGet(ctx context.Context, id string) (*orderly.Deal, error) {
	var (
		d                  orderly.Deal
		limit, timeout, at int64
	)
	err := t.queryRow(ctx, qDealGet, id).Scan(&d.ID, &d.SKU, &d.GroupPrice, &d.Currency, &d.MinMembers, &d.MaxMembers,
		&limit, &timeout, &at)
	if err != nil {
		return nil, translate(err, "deal "+id)
	}
	d.GroupTimeLimitSeconds, d.MemberPaymentTimeoutSeconds, d.CreatedAt = limit/1000, timeout/1000, fromMS(at)
	return &d, nil
}

// GroupInsert implements store.Tx.
func (t *tx) GroupInsert(ctx context.Context, g *orderly.Group) error {
	var wakeAt sql.NullInt64
	if g.State == orderly.GroupForming {
		wakeAt = sql.NullInt64{Int64: ms(g.DeadlineAt), Valid: true}
	}
	_, err := t.exec(ctx, "group "+g.ID, qGroupInsert, g.ID, g.DealID, g.State, g.LeaderUserID, g.MinMembers, g.MaxMembers,
		ms(g.DeadlineAt), wakeAt, ms(g.CreatedAt), nullMS(g.SucceededAt), nullMS(g.FailedAt), g.PaidMembers, max(g.Version, 1), encodeMetadata(g.Metadata))
	return err
}

// scanGroup scans one row of groupColumns.
func scanGroup(r rowScanner) (*orderly.Group, error) {
	var (
		g                     orderly.Group
		deadline, created     int64
		succeededAt, failedAt sql.NullInt64
		metadata              sql.NullString
	)
	err := r.Scan(&g.ID, &g.DealID, &g.State, &g.LeaderUserID, &g.MinMembers, &g.MaxMembers,
		&deadline, &created, &succeededAt, &failedAt, &g.PaidMembers, &g.Version, &metadata, &g.SeatsTaken)
	if err != nil {
		return nil, err
	}
	if g.Metadata, err = decodeMetadata(metadata, "group "+g.ID); err != nil {
		return nil, err
	}
	g.DeadlineAt, g.CreatedAt, g.SucceededAt, g.FailedAt = fromMS(deadline), fromMS(created), timePtr(succeededAt), timePtr(failedAt)
	return &g, nil
}

// GroupGet implements store.Tx.
func (t *tx) GroupGet(ctx context.Context, id string) (*orderly.Group, error) {
	g, err := scanGroup(t.queryRow(ctx, qGroupGet, id))
	return g, translate(err, "group "+id)
}

// GroupList implements store.Tx: one query for the page of groups, one for their members.
func (t *tx) GroupList(ctx context.Context, p *store.ListParams) ([]*orderly.Group, error) {
	rows, err := t.query(ctx, qGroupList, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Group
	byID := map[string]*orderly.Group{}
	for rows.Next() {
		g, err := scanGroup(rows)
		if err != nil {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		g.Members = []*orderly.GroupMember{}
		out = append(out, g)
		byID[g.ID] = g
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list groups: %w", err)
	}
	rows.Close()
	if len(out) == 0 {
		return out, nil
	}
	members, err := t.query(ctx, qGroupListMembers, p.AfterID, out[len(out)-1].ID)
	if err != nil {
		return nil, fmt.Errorf("list groups' members: %w", err)
	}
	defer members.Close()
	for members.Next() {
		m, err := scanMember(members)
		if err != nil {
			return nil, fmt.Errorf("list groups' members: %w", err)
		}
		if g := byID[m.GroupID]; g != nil {
			g.Members = append(g.Members, m)
		}
	}
	return out, members.Err()
}

// GroupLock implements store.Tx.
func (t *tx) GroupLock(ctx context.Context, id string) (*orderly.Group, error) {
	var got string
	if err := t.queryRow(ctx, qGroupLock, id).Scan(&got); err != nil {
		return nil, translate(err, "group "+id)
	}
	return t.GroupGet(ctx, id)
}

// GroupsLockByOrders implements store.Tx.
func (t *tx) GroupsLockByOrders(ctx context.Context, orderIDs []string) ([]string, error) {
	if len(orderIDs) == 0 {
		return nil, nil
	}
	ids, err := t.strings(ctx, qGroupIDsOfOrders, jsonList(orderIDs))
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	return t.strings(ctx, qGroupsLock, idList(ids))
}

// GroupMembersFailing implements store.Tx.
func (t *tx) GroupMembersFailing(ctx context.Context, orderIDs []string, now time.Time) ([]string, error) {
	if len(orderIDs) == 0 {
		return nil, nil
	}
	ids, err := t.strings(ctx, qGroupMembersFailing, jsonList(orderIDs), ms(now))
	if err != nil {
		return nil, fmt.Errorf("members of failing groups: %w", err)
	}
	return ids, nil
}

// strings runs a query of one text column.
func (t *tx) strings(ctx context.Context, q *query, args ...any) ([]string, error) {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// GroupAddPaid implements store.Tx.
func (t *tx) GroupAddPaid(ctx context.Context, id string, delta int64, states []orderly.GroupState) (bool, error) {
	if len(states) == 0 {
		return false, fmt.Errorf("paid members of group %s: no states", id)
	}
	args := append(append([]any{delta, id}, stateArgs(states)...), delta, delta)
	n, err := t.exec(ctx, "paid members of group "+id, qGroupAddPaid, args...)
	return n == 1, err
}

// GroupSetState implements store.Tx.
func (t *tx) GroupSetState(ctx context.Context, p *store.GroupSetStateParams) (bool, error) {
	at := ms(p.At)
	n, err := t.exec(ctx, "group "+p.ID, qGroupSetState, p.To, p.To, at, p.To, at, p.ID, p.From)
	return n == 1, err
}

// GroupsDue implements store.Tx.
func (t *tx) GroupsDue(ctx context.Context, now time.Time, limit int) ([]*store.DueGroup, error) {
	rows, err := t.query(ctx, qGroupsDue, ms(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due groups: %w", err)
	}
	defer rows.Close()
	var out []*store.DueGroup
	for rows.Next() {
		var (
			g        store.DueGroup
			deadline int64
		)
		if err := rows.Scan(&g.ID, &g.DealID, &deadline); err != nil {
			return nil, fmt.Errorf("due groups: %w", err)
		}
		g.DeadlineAt = fromMS(deadline)
		out = append(out, &g)
	}
	return out, rows.Err()
}

// GroupNextWakeAt implements store.Tx.
func (t *tx) GroupNextWakeAt(ctx context.Context) (time.Time, bool, error) {
	var v sql.NullInt64
	if err := t.queryRow(ctx, qGroupNextWakeAt).Scan(&v); err != nil {
		return time.Time{}, false, fmt.Errorf("next group deadline: %w", err)
	}
	if !v.Valid {
		return time.Time{}, false, nil
	}
	return fromMS(v.Int64), true, nil
}

// GroupsOverdueCount implements store.Tx.
func (t *tx) GroupsOverdueCount(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := t.queryRow(ctx, qGroupsOverdueCount, ms(before)).Scan(&n)
	return n, translate(err, "overdue groups")
}

// GroupMemberInsert implements store.Tx.
func (t *tx) GroupMemberInsert(ctx context.Context, m *orderly.GroupMember) error {
	_, err := t.exec(ctx, "member "+m.UserID+" of group "+m.GroupID, qGroupMemberInsert, m.OrderID, m.GroupID, m.UserID, m.UserID, ms(m.JoinedAt))
	return err
}

func scanMember(r rowScanner) (*orderly.GroupMember, error) {
	var (
		m      orderly.GroupMember
		joined int64
		left   sql.NullInt64
	)
	if err := r.Scan(&m.GroupID, &m.UserID, &m.OrderID, &m.OrderState, &m.PayStatus, &joined, &left); err != nil {
		return nil, err
	}
	m.JoinedAt, m.LeftAt = fromMS(joined), timePtr(left)
	return &m, nil
}

// GroupMembers implements store.Tx.
func (t *tx) GroupMembers(ctx context.Context, groupID string) ([]*orderly.GroupMember, error) {
	rows, err := t.query(ctx, qGroupMembers, groupID)
	if err != nil {
		return nil, fmt.Errorf("members of group %s: %w", groupID, err)
	}
	defer rows.Close()
	out := []*orderly.GroupMember{}
	for rows.Next() {
		m, err := scanMember(rows)
		if err != nil {
			return nil, fmt.Errorf("members of group %s: %w", groupID, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// GroupMemberByOrder implements store.Tx.
func (t *tx) GroupMemberByOrder(ctx context.Context, orderID string) (*orderly.GroupMember, error) {
	m, err := scanMember(t.queryRow(ctx, qGroupMemberByOrder, orderID))
	return m, translate(err, "group member of order "+orderID)
}

// GroupMemberSeat implements store.Tx.
func (t *tx) GroupMemberSeat(ctx context.Context, groupID, userID string) (*orderly.GroupMember, error) {
	m, err := scanMember(t.queryRow(ctx, qGroupMemberSeat, groupID, userID))
	return m, translate(err, "seat of user "+userID+" in group "+groupID)
}

// GroupMembersFree implements store.Tx.
func (t *tx) GroupMembersFree(ctx context.Context, orderIDs []string, at time.Time) (int64, error) {
	if len(orderIDs) == 0 {
		return 0, nil
	}
	return t.exec(ctx, "free seats", qGroupMembersFree, t.db.d.byIDsArgs(idList(orderIDs), []any{ms(at)}, nil)...)
}
