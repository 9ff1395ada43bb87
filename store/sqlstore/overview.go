package sqlstore

import (
	"context"
	"fmt"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

var (
	qOrderStateCounts = sqlText(`SELECT flow, state, COUNT(*) FROM orders GROUP BY flow, state ORDER BY flow, state`)
	qOrdersNextWake   = sqlText(`SELECT ` + dueColumns + ` FROM orders WHERE wake_at IS NOT NULL ORDER BY wake_at, id LIMIT ?`)
	// qGroupsByState filters on deadline_at only when asked (flag = 1).
	qGroupsByState = sqlText(`SELECT ` + groupColumns + ` FROM deal_groups g WHERE g.id > ? AND g.state = ?
		AND (? = 0 OR g.deadline_at < ?) ORDER BY g.id LIMIT ?`)
)

// OrderStateCounts implements store.Tx.
func (t *tx) OrderStateCounts(ctx context.Context) ([]*store.StateCount, error) {
	rows, err := t.query(ctx, qOrderStateCounts)
	if err != nil {
		return nil, fmt.Errorf("order state counts: %w", err)
	}
	defer rows.Close()
	var out []*store.StateCount
	for rows.Next() {
		var c store.StateCount
		if err := rows.Scan(&c.Flow, &c.State, &c.Count); err != nil {
			return nil, fmt.Errorf("order state counts: %w", err)
		}
		out = append(out, &c)
	}
	return out, rows.Err()
}

// OrdersNextWake implements store.Tx.
func (t *tx) OrdersNextWake(ctx context.Context, limit int) ([]*store.DueOrder, error) {
	return t.dueOrders(ctx, qOrdersNextWake, limit)
}

// GroupsByState implements store.Tx.
func (t *tx) GroupsByState(ctx context.Context, p *store.GroupsByStateParams) ([]*orderly.Group, error) {
	rows, err := t.query(ctx, qGroupsByState, p.AfterID, string(p.State), boolInt(!p.DeadlineBefore.IsZero()), ms(p.DeadlineBefore), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("groups by state: %w", err)
	}
	defer rows.Close()
	var out []*orderly.Group
	for rows.Next() {
		g, err := scanGroup(rows)
		if err != nil {
			return nil, fmt.Errorf("groups by state: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
