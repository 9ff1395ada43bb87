package sqlstore

import (
	"context"
	"database/sql"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

const tripColumns = `t.order_id, t.rider_id, t.driver_id, o.state, o.close_reason, t.payment_method, t.currency,
	t.estimate, t.hold_id, t.hold_amount, t.hold_expires_at, t.fare, t.cancellation_fee, t.captured, t.released,
	t.extra_charged, t.collection_due, t.driver_payout, t.platform_fee, t.refunded, t.payment_saga_id,
	t.refund_saga_id, t.created_at, t.updated_at, t.version, o.metadata`

var (
	qTripInsert = sqlText(`INSERT INTO trips (order_id, rider_id, driver_id, payment_method, currency, estimate, hold_id,
		hold_amount, hold_expires_at, fare, cancellation_fee, captured, released, extra_charged, collection_due,
		driver_payout, platform_fee, refunded, payment_saga_id, refund_saga_id, created_at, updated_at, version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	qTripGet  = sqlText(`SELECT ` + tripColumns + ` FROM trips t JOIN orders o ON o.id = t.order_id WHERE t.order_id = ?`)
	qTripList = sqlText(`SELECT ` + tripColumns + ` FROM trips t JOIN orders o ON o.id = t.order_id
		WHERE t.order_id > ? ORDER BY t.order_id LIMIT ?`)
	qTripUpdate = sqlText(`UPDATE trips SET driver_id = ?, fare = ?, cancellation_fee = ?, captured = ?, released = ?,
		extra_charged = ?, collection_due = ?, driver_payout = ?, platform_fee = ?, refunded = ?, payment_saga_id = ?,
		refund_saga_id = ?, updated_at = ?, version = version + 1
		WHERE order_id = ? AND version = ?`)
)

// TripInsert implements store.Tx.
func (t *tx) TripInsert(ctx context.Context, p *orderly.Trip) error {
	_, err := t.exec(ctx, "trip "+p.ID, qTripInsert, p.ID, p.RiderID, p.DriverID, p.PaymentMethod, p.Currency, p.Estimate,
		p.HoldID, p.HoldAmount, ms(p.HoldExpiresAt), p.Fare, p.CancellationFee, p.Captured, p.Released, p.ExtraCharged,
		p.CollectionDue, p.DriverPayout, p.PlatformFee, p.Refunded, p.PaymentSagaID, p.RefundSagaID, ms(p.CreatedAt),
		ms(p.UpdatedAt), p.Version)
	return err
}

// TripGet implements store.Tx.
func (t *tx) TripGet(ctx context.Context, id string) (*orderly.Trip, error) {
	p, err := scanTrip(t.queryRow(ctx, qTripGet, id))
	if err != nil {
		return nil, translate(t.check(err), "trip "+id)
	}
	return p, nil
}

// TripList implements store.Tx.
func (t *tx) TripList(ctx context.Context, p *store.ListParams) ([]*orderly.Trip, error) {
	return scanAll(t, ctx, "list trips", scanTrip, qTripList, p.AfterID, p.Limit)
}

func scanTrip(r rowScanner) (*orderly.Trip, error) {
	var (
		p                orderly.Trip
		reason, metadata sql.NullString
		expires, at, upd int64
	)
	err := r.Scan(&p.ID, &p.RiderID, &p.DriverID, &p.State, &reason, &p.PaymentMethod,
		&p.Currency, &p.Estimate, &p.HoldID, &p.HoldAmount, &expires, &p.Fare, &p.CancellationFee, &p.Captured,
		&p.Released, &p.ExtraCharged, &p.CollectionDue, &p.DriverPayout, &p.PlatformFee, &p.Refunded, &p.PaymentSagaID,
		&p.RefundSagaID, &at, &upd, &p.Version, &metadata)
	if err != nil {
		return nil, err
	}
	if p.Metadata, err = decodeMetadata(metadata, "trip "+p.ID); err != nil {
		return nil, err
	}
	p.CloseReason, p.HoldExpiresAt, p.CreatedAt, p.UpdatedAt = reason.String, fromMS(expires), fromMS(at), fromMS(upd)
	return &p, nil
}

// TripUpdate implements store.Tx.
func (t *tx) TripUpdate(ctx context.Context, p *orderly.Trip) (bool, error) {
	n, err := t.exec(ctx, "trip "+p.ID, qTripUpdate, p.DriverID, p.Fare, p.CancellationFee, p.Captured, p.Released,
		p.ExtraCharged, p.CollectionDue, p.DriverPayout, p.PlatformFee, p.Refunded, p.PaymentSagaID, p.RefundSagaID,
		ms(p.UpdatedAt), p.ID, p.Version)
	if err != nil || n != 1 {
		return false, err
	}
	p.Version++
	return true, nil
}
