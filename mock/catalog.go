package mock

import (
	"context"

	"github.com/orderlyhq/orderly"
)

var _ orderly.CatalogService = (*CatalogService)(nil)

// CatalogService is a mock of orderly.CatalogService.
type CatalogService struct {
	SetStockFn     func(ctx context.Context, sku string, available int64) (*orderly.Stock, error)
	StockFn        func(ctx context.Context, sku string) (*orderly.Stock, error)
	AdjustStockFn  func(ctx context.Context, sku string, delta int64) (*orderly.Stock, error)
	ListStockFn    func(ctx context.Context, after string, limit int) ([]*orderly.Stock, string, error)
	CreateCouponFn func(ctx context.Context, params *orderly.CreateCouponParams) (*orderly.Coupon, error)
	CouponFn       func(ctx context.Context, id string) (*orderly.Coupon, error)
}

// SetStock calls SetStockFn.
func (s *CatalogService) SetStock(ctx context.Context, sku string, available int64) (*orderly.Stock, error) {
	if s.SetStockFn == nil {
		unset("CatalogService.SetStock")
	}
	return s.SetStockFn(ctx, sku, available)
}

// Stock calls StockFn.
func (s *CatalogService) Stock(ctx context.Context, sku string) (*orderly.Stock, error) {
	if s.StockFn == nil {
		unset("CatalogService.Stock")
	}
	return s.StockFn(ctx, sku)
}

// AdjustStock calls AdjustStockFn.
func (s *CatalogService) AdjustStock(ctx context.Context, sku string, delta int64) (*orderly.Stock, error) {
	if s.AdjustStockFn == nil {
		unset("CatalogService.AdjustStock")
	}
	return s.AdjustStockFn(ctx, sku, delta)
}

// ListStock calls ListStockFn.
func (s *CatalogService) ListStock(ctx context.Context, after string, limit int) ([]*orderly.Stock, string, error) {
	if s.ListStockFn == nil {
		unset("CatalogService.ListStock")
	}
	return s.ListStockFn(ctx, after, limit)
}

// CreateCoupon calls CreateCouponFn.
func (s *CatalogService) CreateCoupon(ctx context.Context, params *orderly.CreateCouponParams) (*orderly.Coupon, error) {
	if s.CreateCouponFn == nil {
		unset("CatalogService.CreateCoupon")
	}
	return s.CreateCouponFn(ctx, params)
}

// Coupon calls CouponFn.
func (s *CatalogService) Coupon(ctx context.Context, id string) (*orderly.Coupon, error) {
	if s.CouponFn == nil {
		unset("CatalogService.Coupon")
	}
	return s.CouponFn(ctx, id)
}
