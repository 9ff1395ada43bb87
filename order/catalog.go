package order

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// SetStock implements orderly.CatalogService.
func (s *Service) SetStock(ctx context.Context, sku string, available int64) (st *orderly.Stock, err error) {
	if !ValidID(sku) {
		return nil, orderly.Errorf(orderly.EINVALID, "sku %s", idRule)
	} else if available < 0 || available > MaxStock {
		return nil, orderly.Errorf(orderly.EINVALID, "available must be 0–%d units", int64(MaxStock))
	}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		st, err = tx.StockSet(ctx, sku, available)
		return err
	})
	return st, err
}

// Stock implements orderly.CatalogService.
func (s *Service) Stock(ctx context.Context, sku string) (st *orderly.Stock, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		st, err = tx.StockGet(ctx, sku)
		return err
	})
	return st, err
}

// AdjustStock implements orderly.CatalogService.
func (s *Service) AdjustStock(ctx context.Context, sku string, delta int64) (st *orderly.Stock, err error) {
	if delta == 0 || delta > MaxStock || delta < -MaxStock {
		return nil, orderly.Errorf(orderly.EINVALID, "delta must be a non-zero number of units, at most %d either way", int64(MaxStock))
	}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.StockAdjust(ctx, sku, delta, MaxStock)
		if err != nil {
			return err
		}
		if st, err = tx.StockGet(ctx, sku); err != nil || ok {
			return err
		}
		if delta > 0 {
			return orderly.Errorf(orderly.EINVALID, "sku %s has %d units available; %d more would pass the most a SKU holds, %d",
				sku, st.Available, delta, int64(MaxStock))
		}
		return orderly.Errorf(orderly.EOUTOFSTOCK, "sku %s has %d units available, fewer than the %d to remove", sku, st.Available, -delta)
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// ListStock implements orderly.CatalogService.
func (s *Service) ListStock(ctx context.Context, after string, limit int) (list []*orderly.Stock, next string, err error) {
	if limit < 1 || limit > 1000 {
		return nil, "", orderly.Errorf(orderly.EINVALID, "limit must be 1–1000")
	}
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		list, err = tx.StockList(ctx, after, limit+1) // one more tells whether a next page exists
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if len(list) > limit {
		list, next = list[:limit], list[limit-1].SKU
	}
	return list, next, nil
}

// CreateCoupon implements orderly.CatalogService.
func (s *Service) CreateCoupon(ctx context.Context, p *orderly.CreateCouponParams) (*orderly.Coupon, error) {
	switch {
	case !ValidID(p.UserID):
		return nil, orderly.Errorf(orderly.EINVALID, "user_id %s", idRule)
	case !orderly.ValidAmount(p.AmountOff):
		return nil, orderly.Errorf(orderly.EINVALID, "amount_off %s", orderly.AmountRule)
	case !orderly.ValidCurrency(p.Currency):
		return nil, orderly.Errorf(orderly.EINVALID, "currency %s", currencyRule)
	}
	id, err := NewID()
	if err != nil {
		return nil, err
	}
	c := &orderly.Coupon{ID: id, UserID: p.UserID, AmountOff: p.AmountOff, Currency: p.Currency, State: orderly.CouponAvailable}
	if p.ExpiresAt != nil {
		t := p.ExpiresAt.UTC().Truncate(time.Millisecond)
		c.ExpiresAt = &t
	}
	err = s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if c.ExpiresAt != nil && !c.ExpiresAt.After(now) {
			return orderly.Errorf(orderly.EINVALID, "expires_at must be in the future")
		}
		c.CreatedAt = now
		return tx.CouponInsert(ctx, c)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Coupon implements orderly.CatalogService. The state is as of the database clock
// (Coupon.StateAt): an available coupon past its expires_at reads expired.
func (s *Service) Coupon(ctx context.Context, id string) (c *orderly.Coupon, err error) {
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if c, err = tx.CouponGet(ctx, id); err != nil {
			return err
		}
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		c.State = c.StateAt(now)
		return nil
	})
	return c, err
}
