-- Ride-hailing trips (README.md "Ride-hailing"): the money of an order of flow ride_hailing.
-- The trip's state is its order's (orders.state, audit trail in transitions); this row holds
-- the card hold placed at request and what became of it, in minor units of currency.
--
-- The hold is never over-captured: captured <= hold_amount, and captured + released never
-- exceeds it (they are equal once the hold is resolved). A fare above the hold is charged
-- as a second payment (extra_charged); collection_due is the fare that could not be
-- charged because the hold had expired. version guards every update (store.TripTx).

-- +goose Up
CREATE TABLE trips (
    order_id         TEXT NOT NULL PRIMARY KEY,
    rider_id         TEXT NOT NULL,
    driver_id        TEXT NOT NULL DEFAULT '',
    payment_method   TEXT NOT NULL CHECK (payment_method IN ('card')),
    currency         TEXT NOT NULL,
    estimate         BIGINT NOT NULL CHECK (estimate > 0),
    hold_id          TEXT NOT NULL,
    hold_amount      BIGINT NOT NULL,
    hold_expires_at  BIGINT NOT NULL,
    fare             BIGINT NOT NULL DEFAULT 0 CHECK (fare >= 0),
    cancellation_fee BIGINT NOT NULL DEFAULT 0 CHECK (cancellation_fee >= 0),
    captured         BIGINT NOT NULL DEFAULT 0 CHECK (captured >= 0),
    released         BIGINT NOT NULL DEFAULT 0 CHECK (released >= 0),
    extra_charged    BIGINT NOT NULL DEFAULT 0 CHECK (extra_charged >= 0),
    collection_due   BIGINT NOT NULL DEFAULT 0 CHECK (collection_due >= 0),
    driver_payout    BIGINT NOT NULL DEFAULT 0 CHECK (driver_payout >= 0),
    platform_fee     BIGINT NOT NULL DEFAULT 0 CHECK (platform_fee >= 0),
    refunded         BIGINT NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    payment_saga_id  TEXT NOT NULL DEFAULT '',
    refund_saga_id   TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    version          BIGINT NOT NULL DEFAULT 1,
    CONSTRAINT trips_hold_check CHECK (hold_amount >= estimate),
    CONSTRAINT trips_capture_check CHECK (captured + released <= hold_amount),
    CONSTRAINT trips_refund_check CHECK (refunded <= captured + extra_charged)
);

-- +goose Down
DROP TABLE trips;
