-- orderly schema, SQLite dialect. Times are unix milliseconds (UTC); money is integer
-- minor currency units. Every state column has a CHECK constraint that mirrors the Go
-- constants in package orderly.

-- +goose Up
CREATE TABLE orders (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT    NOT NULL,
    flow               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    pay_status         TEXT    NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded')),
    items              TEXT    NOT NULL, -- JSON array of {sku, quantity, unit_price}
    amount             INTEGER NOT NULL CHECK (amount >= 0),
    currency           TEXT    NOT NULL,
    coupon_id          TEXT,
    current_payment_id TEXT,
    created_at         INTEGER NOT NULL,
    expires_at         INTEGER NOT NULL, -- payment deadline
    close_at           INTEGER NOT NULL, -- expires_at + grace period
    wake_at            INTEGER NOT NULL, -- when the closer next looks at the order (close_at, later while inspecting)
    closed_at          INTEGER,
    close_reason       TEXT CHECK (close_reason IS NULL OR close_reason IN ('payment_timeout', 'buyer_cancelled')),
    paid_at            INTEGER,
    version            INTEGER NOT NULL DEFAULT 1,
    idempotency_key    TEXT,
    request_hash       TEXT,
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
);
-- The timer's "earliest deadline" and the claim both read only open orders.
CREATE INDEX orders_open_wake_at ON orders (wake_at) WHERE state = 'pending_payment';
CREATE INDEX orders_open_close_at ON orders (close_at) WHERE state = 'pending_payment';
CREATE UNIQUE INDEX orders_idempotency_key ON orders (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE order_transitions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id   TEXT    NOT NULL REFERENCES orders (id),
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    event      TEXT    NOT NULL,
    cause      TEXT    NOT NULL DEFAULT '',
    actor      TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    trace_id   TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX order_transitions_order_id ON order_transitions (order_id, id);

CREATE TABLE stock (
    sku       TEXT PRIMARY KEY,
    available INTEGER NOT NULL CHECK (available >= 0),
    held      INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
    sold      INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0)
);

CREATE TABLE reservations (
    order_id   TEXT    NOT NULL REFERENCES orders (id),
    sku        TEXT    NOT NULL REFERENCES stock (sku),
    quantity   INTEGER NOT NULL CHECK (quantity > 0),
    state      TEXT    NOT NULL CHECK (state IN ('held', 'released', 'committed')),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (order_id, sku)
);

CREATE TABLE coupons (
    id         TEXT PRIMARY KEY,
    user_id    TEXT    NOT NULL,
    amount_off INTEGER NOT NULL CHECK (amount_off > 0),
    currency   TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('available', 'frozen', 'used', 'expired')),
    order_id   TEXT,
    expires_at INTEGER,
    created_at INTEGER NOT NULL,
    CHECK ((state IN ('frozen', 'used')) = (order_id IS NOT NULL))
);

CREATE TABLE payments (
    id             TEXT PRIMARY KEY,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    attempt        INTEGER NOT NULL,
    channel        TEXT    NOT NULL,
    channel_txn_id TEXT UNIQUE,
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('initiated', 'succeeded', 'failed', 'refund_pending', 'refunded')),
    fail_reason    TEXT    NOT NULL DEFAULT '',
    created_at     INTEGER NOT NULL,
    succeeded_at   INTEGER,
    refunded_at    INTEGER,
    UNIQUE (order_id, attempt)
);

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    topic           TEXT    NOT NULL,
    message_key     TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER
);
CREATE INDEX outbox_pending_next_attempt_at ON outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX outbox_dead ON outbox (id) WHERE state = 'dead';
CREATE INDEX outbox_delivered_at ON outbox (delivered_at) WHERE state = 'delivered';

-- +goose Down
DROP TABLE outbox;
DROP TABLE payments;
DROP TABLE coupons;
DROP TABLE reservations;
DROP TABLE stock;
DROP TABLE order_transitions;
DROP TABLE orders;
