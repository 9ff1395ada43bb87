package closer

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// TriggerQueue names passes driven by the delay queue.
const TriggerQueue = "delay_queue"

// queueDrift is how far a delay queue's score may be from the database's wake_at before
// the deep check rewrites it (docs/concepts/deadlines-and-closing.md).
const queueDrift = 5 * time.Second

// closeQueued claims due ids from the queue until a claim comes back short and closes
// them, returning to the queue the ids that stay open.
func (c *Closer) closeQueued(ctx context.Context) error {
	for {
		ids, err := c.cfg.DelayQueue.ClaimDue(ctx, c.dbNow(), c.cfg.BatchSize)
		if err != nil || len(ids) == 0 {
			return err
		}
		_, paying, err := c.closeBatch(ctx, TriggerQueue, nil, batchOf{ids: ids})
		if err == nil && len(paying) > 0 {
			_, err = c.inspect(ctx, TriggerQueue, paying, nil)
		}
		if rerr := c.requeue(ctx, ids); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil || len(ids) < c.cfg.BatchSize {
			return err
		}
	}
}

// requeue puts the ids that are still open back into the queue at their wake_at.
func (c *Closer) requeue(ctx context.Context, ids []string) error {
	var open []*store.DueOrder
	err := c.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		open, err = tx.OrdersOpen(ctx, &store.OrdersOpenParams{IDs: ids})
		return err
	})
	if err != nil || len(open) == 0 {
		return err
	}
	items := make([]DelayItem, len(open))
	for i, o := range open {
		items[i] = DelayItem{OrderID: o.ID, CloseAt: o.WakeAt}
	}
	return c.cfg.DelayQueue.Add(ctx, items)
}

// repairQueue compares the queue with the database, page by page over the open orders,
// and re-adds the orders the queue lacks or holds more than 5 s off their wake_at (lost
// data after a Redis restart or FLUSHALL, a failed Add). It returns the orders seen and
// repaired.
func (c *Closer) repairQueue(ctx context.Context) (seen, repaired int64, err error) {
	after := ""
	for {
		var page []*store.DueOrder
		err := c.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
			page, err = tx.OrdersOpen(ctx, &store.OrdersOpenParams{AfterID: after, Limit: 1000})
			return err
		})
		if err != nil || len(page) == 0 {
			return seen, repaired, err
		}
		ids := make([]string, len(page))
		for i, o := range page {
			ids[i] = o.ID
		}
		scores, err := c.cfg.DelayQueue.Scores(ctx, ids)
		if err != nil {
			return seen, repaired, err
		}
		var fix []DelayItem
		for _, o := range page {
			s, ok := scores[o.ID]
			if d := s.Sub(o.WakeAt); !ok || d > queueDrift || d < -queueDrift {
				fix = append(fix, DelayItem{OrderID: o.ID, CloseAt: o.WakeAt})
			}
		}
		if len(fix) > 0 {
			if err := c.cfg.DelayQueue.Add(ctx, fix); err != nil {
				return seen, repaired, err
			}
			c.cfg.Logger.Warn("deep check repaired the delay queue", "orders", len(fix))
		}
		seen += int64(len(page))
		repaired += int64(len(fix))
		after = page[len(page)-1].ID
	}
}
