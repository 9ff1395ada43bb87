package order

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// CreateSetInTx writes the orders of ps, each without stock or coupon (as
// CreateOptions.NoResources), in tx at now (tx's database clock), in multi-row statements:
// the orders and their creation audit rows for a batch of wallet checkouts run as sets
// (package checkout). ids[i] is the id of ps[i]'s order. Each p is decided as CreateInTx
// decides it (validation, idempotency key), nothing written for one that fails; two of ps
// with one user and idempotency key are one request (the later one a replay of the
// earlier, or EIDEMPOTENCY for another body). It returns, per p, the order (the replayed
// one when created[i] is false) or its error (errs[i]: the domain's, such as EINVALID or
// EIDEMPOTENCY). Its own error is the database's (ECONFLICT when an idempotency key was
// taken by another transaction since its look-up): tx must then roll back. After tx
// commits, call Created for each order created.
func (s *Service) CreateSetInTx(ctx context.Context, tx store.Tx, ps []*orderly.CreateOrderParams, ids []string, now time.Time) (
	orders []*orderly.Order, created []bool, errs []error, err error,
) {
	orders, created, errs = make([]*orderly.Order, len(ps)), make([]bool, len(ps)), make([]error, len(ps))
	var (
		inserts []*store.OrderInsertParams
		audits  []*orderly.Transition
		written = map[string]int{} // user and idempotency key → the index writing them
		hashes  = make([]string, len(ps))
	)
	for i, p := range ps {
		n, err := s.newOrder(ctx, tx, p, &CreateOptions{ID: ids[i], NoResources: true, Now: now})
		if err != nil {
			if orderly.ErrorCode(err) == orderly.EINTERNAL {
				return nil, nil, nil, err
			}
			errs[i] = err
			continue
		}
		if n.replay != nil {
			orders[i] = n.replay
			continue
		}
		hashes[i] = n.hash
		if p.IdempotencyKey != "" {
			key := p.UserID + "\x00" + p.IdempotencyKey
			if first, ok := written[key]; ok {
				if hashes[first] == n.hash {
					replay := *orders[first]
					orders[i] = &replay
				} else {
					errs[i] = errKeyReused(p.IdempotencyKey)
				}
				continue
			}
			written[key] = i
		}
		orders[i], created[i] = n.order, true
		inserts = append(inserts, &store.OrderInsertParams{Order: n.order, IdempotencyKey: p.IdempotencyKey, RequestHash: n.hash, NoDeadline: !n.timed})
		audits = append(audits, n.audit(ctx, p))
	}
	if len(inserts) == 0 {
		return orders, created, errs, nil
	}
	if err := s.cfg.Machine.Insert(ctx, tx, inserts...); err != nil {
		return nil, nil, nil, err
	}
	if err := tx.TransitionsInsertMany(ctx, audits); err != nil {
		return nil, nil, nil, err
	}
	for _, in := range inserts {
		if err := keepTrace(ctx, tx, in.Order.ID); err != nil {
			return nil, nil, nil, err
		}
	}
	return orders, created, errs, nil
}

// ReserveSet is Reserve of many orders in tx at now, as one set: the stock rows of all
// their SKUs are locked in SKU order and read in one statement, each order in turn takes
// its units if all of its items fit (else EOUTOFSTOCK naming its first SKU short, in SKU
// order, as Reserve names it, and nothing is reserved for it), and the reservations and
// the per-SKU totals are written in a few statements. It returns one error per order (nil:
// reserved); its own error is the database's (tx must then roll back).
func ReserveSet(ctx context.Context, tx store.Tx, orders []*orderly.Order, now time.Time) ([]error, error) {
	var skus []string
	for _, o := range orders {
		for _, it := range o.Items {
			skus = append(skus, it.SKU)
		}
	}
	available, err := tx.StockLockAvailableMany(ctx, skus)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(orders))
	var reserve []*store.StockReserveParams
	for i, o := range orders {
		items := slices.SortedFunc(slices.Values(o.Items), func(a, b orderly.Item) int { return strings.Compare(a.SKU, b.SKU) })
		for _, it := range items {
			if have, ok := available[it.SKU]; !ok || have < it.Quantity {
				errs[i] = errOutOfStock(it.SKU, it.Quantity)
				break
			}
		}
		if errs[i] != nil {
			continue
		}
		for _, it := range items {
			available[it.SKU] -= it.Quantity
			reserve = append(reserve, &store.StockReserveParams{OrderID: o.ID, SKU: it.SKU, Quantity: it.Quantity, Now: now})
		}
	}
	if err := tx.StockReserveSet(ctx, reserve); err != nil {
		return nil, err
	}
	return errs, nil
}
