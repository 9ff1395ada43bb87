-- Refunds as shops expect them: full and partial, from paid, shipped and completed, several
-- per order up to the captured amount and never beyond it. orders.refunded_amount is the
-- sum of the order's refunds that are requested or succeeded: the guarded UPDATE that adds
-- to it is what keeps refunds within the captured amount, and its CHECK is the backstop.
-- reservations.refunded / restocked count the units of a sold reservation that refunds
-- covered and that went back to available stock.
--
-- SQLite cannot change a CHECK constraint in place: orders and order_transitions (whose
-- pay_status_from / pay_status_to lists also gain partially_refunded) are rebuilt
-- (https://www.sqlite.org/lang_altertable.html#otheralter). Foreign keys must be off while
-- a table is swapped, and that pragma has no effect inside a transaction, so this
-- migration runs outside goose's transaction and opens its own. Down keeps the audit
-- trail's wider lists.

-- +goose NO TRANSACTION
-- +goose Up
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE orders_new (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT    NOT NULL,
    flow               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    pay_status         TEXT    NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
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
    refunded_amount    INTEGER NOT NULL DEFAULT 0, -- Σ refunds requested or succeeded
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL)),
    CHECK (refunded_amount >= 0 AND refunded_amount <= amount)
);
INSERT INTO orders_new (id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at, wake_at, closed_at, close_reason, paid_at,
    version, idempotency_key, request_hash)
SELECT id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at, wake_at, closed_at, close_reason, paid_at,
    version, idempotency_key, request_hash
FROM orders;
DROP TABLE orders;
ALTER TABLE orders_new RENAME TO orders;
CREATE INDEX orders_open_wake_at ON orders (wake_at) WHERE state = 'pending_payment';
CREATE INDEX orders_open_close_at ON orders (close_at) WHERE state = 'pending_payment';
CREATE UNIQUE INDEX orders_idempotency_key ON orders (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE order_transitions_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    order_id        TEXT    NOT NULL REFERENCES orders (id),
    from_state      TEXT    NOT NULL,
    to_state        TEXT    NOT NULL,
    event           TEXT    NOT NULL,
    cause           TEXT    NOT NULL DEFAULT '',
    actor           TEXT    NOT NULL,
    at              INTEGER NOT NULL,
    trace_id        TEXT    NOT NULL DEFAULT '',
    pay_status_from TEXT    NOT NULL DEFAULT ''
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    pay_status_to   TEXT    NOT NULL DEFAULT ''
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded'))
);
INSERT INTO order_transitions_new (id, order_id, from_state, to_state, event, cause, actor, at, trace_id,
    pay_status_from, pay_status_to)
SELECT id, order_id, from_state, to_state, event, cause, actor, at, trace_id, pay_status_from, pay_status_to
FROM order_transitions;
DROP TABLE order_transitions;
ALTER TABLE order_transitions_new RENAME TO order_transitions;
CREATE INDEX order_transitions_order_id ON order_transitions (order_id, id);

ALTER TABLE reservations ADD COLUMN refunded INTEGER NOT NULL DEFAULT 0 CHECK (refunded >= 0 AND refunded <= quantity);
ALTER TABLE reservations ADD COLUMN restocked INTEGER NOT NULL DEFAULT 0 CHECK (restocked >= 0 AND restocked <= quantity);

CREATE TABLE refunds (
    id              TEXT PRIMARY KEY,
    order_id        TEXT    NOT NULL REFERENCES orders (id),
    payment_id      TEXT    NOT NULL REFERENCES payments (id),
    amount          INTEGER NOT NULL CHECK (amount > 0),
    currency        TEXT    NOT NULL,
    items           TEXT    NOT NULL, -- JSON array of {sku, quantity}
    restock         INTEGER NOT NULL CHECK (restock IN (0, 1)),
    reason          TEXT    NOT NULL DEFAULT '',
    state           TEXT    NOT NULL CHECK (state IN ('requested', 'succeeded', 'failed')),
    fail_reason     TEXT    NOT NULL DEFAULT '',
    idempotency_key TEXT,
    request_hash    TEXT,
    created_at      INTEGER NOT NULL,
    completed_at    INTEGER,
    CHECK ((state = 'requested') = (completed_at IS NULL))
);
CREATE INDEX refunds_order_id ON refunds (order_id, created_at);
CREATE UNIQUE INDEX refunds_idempotency_key ON refunds (order_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;

-- +goose Down
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
DROP TABLE refunds;
ALTER TABLE reservations DROP COLUMN restocked;
ALTER TABLE reservations DROP COLUMN refunded;
CREATE TABLE orders_old (
    id                 TEXT PRIMARY KEY,
    user_id            TEXT    NOT NULL,
    flow               TEXT    NOT NULL,
    state              TEXT    NOT NULL CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    pay_status         TEXT    NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded')),
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
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL))
);
INSERT INTO orders_old SELECT id, user_id, flow, state, pay_status, items, amount, currency, coupon_id,
    current_payment_id, created_at, expires_at, close_at, wake_at, closed_at, close_reason, paid_at,
    version, idempotency_key, request_hash FROM orders;
DROP TABLE orders;
ALTER TABLE orders_old RENAME TO orders;
CREATE INDEX orders_open_wake_at ON orders (wake_at) WHERE state = 'pending_payment';
CREATE INDEX orders_open_close_at ON orders (close_at) WHERE state = 'pending_payment';
CREATE UNIQUE INDEX orders_idempotency_key ON orders (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
COMMIT;
PRAGMA foreign_keys = ON;
