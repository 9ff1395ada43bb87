-- Flows as data (README.md "Flows"). Which states and close reasons exist is declared by the
-- flows registered at the composition root (orderly.Flow), not by the schema, so adding a
-- flow needs no change to the orders table: the CHECK lists of orders.state and
-- orders.close_reason go. wake_at now says whether an order waits on a deadline: set (to
-- its deadline, later while its payment is inspected) exactly while the order is in a timed
-- state of its flow, NULL otherwise; the timer, the sweep and the deep check read only the
-- rows that have one, whatever the flow and the state.
--
-- SQLite cannot change a CHECK constraint or a NOT NULL in place: orders is rebuilt, with
-- foreign keys off (see 00004_refunds.sql).

-- +goose NO TRANSACTION
-- +goose Up
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE orders_new (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT    NOT NULL,
    flow               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state <> ''),
    pay_status         TEXT    NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    items              TEXT    NOT NULL, -- JSON array of {sku, quantity, unit_price}
    amount             INTEGER NOT NULL CHECK (amount >= 0),
    currency           TEXT    NOT NULL,
    coupon_id          TEXT,
    current_payment_id TEXT,
    created_at         INTEGER NOT NULL,
    expires_at         INTEGER NOT NULL, -- payment deadline
    close_at           INTEGER NOT NULL, -- expires_at + grace period
    wake_at            INTEGER,          -- set only in a timed state: when the closer next looks at the order
    closed_at          INTEGER,
    close_reason       TEXT CHECK (close_reason IS NULL OR close_reason <> ''),
    paid_at            INTEGER,
    version            INTEGER NOT NULL DEFAULT 1,
    idempotency_key    TEXT,
    request_hash       TEXT,
    refunded_amount    INTEGER NOT NULL DEFAULT 0, -- Σ refunds requested or succeeded
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL)),
    CHECK (refunded_amount >= 0 AND refunded_amount <= amount)
);
INSERT INTO orders_new (id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at, wake_at, closed_at, close_reason, paid_at,
    version, idempotency_key, request_hash, refunded_amount)
SELECT id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at,
    CASE WHEN state = 'pending_payment' THEN wake_at END, closed_at, close_reason, paid_at,
    version, idempotency_key, request_hash, refunded_amount
FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_wake_at ON orders (wake_at) WHERE wake_at IS NOT NULL;
CREATE UNIQUE INDEX orders_idempotency_key ON orders (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;

-- +goose Down
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE orders_old (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT    NOT NULL,
    flow               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    pay_status         TEXT    NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    items              TEXT    NOT NULL,
    amount             INTEGER NOT NULL CHECK (amount >= 0),
    currency           TEXT    NOT NULL,
    coupon_id          TEXT,
    current_payment_id TEXT,
    created_at         INTEGER NOT NULL,
    expires_at         INTEGER NOT NULL,
    close_at           INTEGER NOT NULL,
    wake_at            INTEGER NOT NULL,
    closed_at          INTEGER,
    close_reason       TEXT CHECK (close_reason IS NULL OR close_reason IN ('payment_timeout', 'buyer_cancelled')),
    paid_at            INTEGER,
    version            INTEGER NOT NULL DEFAULT 1,
    idempotency_key    TEXT,
    request_hash       TEXT,
    refunded_amount    INTEGER NOT NULL DEFAULT 0,
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL)),
    CHECK (refunded_amount >= 0 AND refunded_amount <= amount)
);
INSERT INTO orders_old SELECT id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at, COALESCE(wake_at, close_at), closed_at, close_reason,
    paid_at, version, idempotency_key, request_hash, refunded_amount FROM orders;
DROP TABLE orders;
ALTER TABLE orders_old RENAME TO orders;
CREATE INDEX orders_open_wake_at ON orders (wake_at) WHERE state = 'pending_payment';
CREATE INDEX orders_open_close_at ON orders (close_at) WHERE state = 'pending_payment';
CREATE UNIQUE INDEX orders_idempotency_key ON orders (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;
