-- Refunds as shops expect them: full and partial, from paid, shipped and completed, several
-- per order up to the captured amount and never beyond it. orders.refunded_amount is the
-- sum of the order's refunds that are requested or succeeded: the guarded UPDATE that adds
-- to it is what keeps concurrent refunds within the captured amount, and its CHECK is the
-- backstop. The pay_status lists of orders and of the audit trail gain partially_refunded.
-- reservations.refunded / restocked count the units of a sold reservation that
-- refunds covered and that went back to available stock.

-- +goose Up
ALTER TABLE orders DROP CONSTRAINT orders_pay_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_pay_status_check
    CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded'));
ALTER TABLE order_transitions
    DROP CONSTRAINT order_transitions_pay_status_from_check,
    DROP CONSTRAINT order_transitions_pay_status_to_check,
    ADD CONSTRAINT order_transitions_pay_status_from_check
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    ADD CONSTRAINT order_transitions_pay_status_to_check
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded'));
ALTER TABLE orders ADD COLUMN refunded_amount BIGINT NOT NULL DEFAULT 0;
ALTER TABLE orders ADD CONSTRAINT orders_refunded_amount_check CHECK (refunded_amount >= 0 AND refunded_amount <= amount);

ALTER TABLE reservations ADD COLUMN refunded BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN restocked BIGINT NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD CONSTRAINT reservations_refunded_check CHECK (refunded >= 0 AND refunded <= quantity);
ALTER TABLE reservations ADD CONSTRAINT reservations_restocked_check CHECK (restocked >= 0 AND restocked <= quantity);

CREATE TABLE refunds (
    id              TEXT PRIMARY KEY,
    order_id        TEXT   NOT NULL REFERENCES orders (id),
    payment_id      TEXT   NOT NULL REFERENCES payments (id),
    amount          BIGINT NOT NULL CHECK (amount > 0),
    currency        TEXT   NOT NULL,
    items           TEXT   NOT NULL, -- JSON array of {sku, quantity}
    restock         BOOLEAN NOT NULL,
    reason          TEXT   NOT NULL DEFAULT '',
    state           TEXT   NOT NULL CHECK (state IN ('requested', 'succeeded', 'failed')),
    fail_reason     TEXT   NOT NULL DEFAULT '',
    idempotency_key TEXT,
    request_hash    TEXT,
    created_at      BIGINT NOT NULL,
    completed_at    BIGINT,
    CHECK ((state = 'requested') = (completed_at IS NULL))
);
CREATE INDEX refunds_order_id ON refunds (order_id, created_at);
CREATE UNIQUE INDEX refunds_idempotency_key ON refunds (order_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP TABLE refunds;
ALTER TABLE order_transitions
    DROP CONSTRAINT order_transitions_pay_status_from_check,
    DROP CONSTRAINT order_transitions_pay_status_to_check,
    ADD CONSTRAINT order_transitions_pay_status_from_check
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded')),
    ADD CONSTRAINT order_transitions_pay_status_to_check
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded'));
ALTER TABLE reservations DROP COLUMN restocked;
ALTER TABLE reservations DROP COLUMN refunded;
ALTER TABLE orders DROP COLUMN refunded_amount;
ALTER TABLE orders DROP CONSTRAINT orders_pay_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_pay_status_check
    CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded'));
