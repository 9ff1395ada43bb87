-- Flows as data (README.md "Flows"). Which states and close reasons exist is declared by the
-- flows registered at the composition root (orderly.Flow), not by the schema, so adding a
-- flow needs no change to the orders table: the CHECK lists of orders.state and
-- orders.close_reason go. wake_at now says whether an order waits on a deadline: set (to
-- its deadline, later while its payment is inspected) exactly while the order is in a timed
-- state of its flow, NULL otherwise; the timer, the sweep and the deep check read only the
-- rows that have one, whatever the flow and the state.

-- +goose Up
ALTER TABLE orders DROP CONSTRAINT orders_state_check;
ALTER TABLE orders ADD CONSTRAINT orders_state_check CHECK (state <> '');
ALTER TABLE orders DROP CONSTRAINT orders_close_reason_check;
ALTER TABLE orders ADD CONSTRAINT orders_close_reason_check CHECK (close_reason IS NULL OR close_reason <> '');
ALTER TABLE orders ALTER COLUMN wake_at DROP NOT NULL;
UPDATE orders SET wake_at = NULL WHERE state <> 'pending_payment';
DROP INDEX orders_open_wake_at;
DROP INDEX orders_open_close_at;
CREATE INDEX orders_wake_at ON orders (wake_at) WHERE wake_at IS NOT NULL;

-- +goose Down
DROP INDEX orders_wake_at;
UPDATE orders SET wake_at = close_at WHERE wake_at IS NULL;
ALTER TABLE orders ALTER COLUMN wake_at SET NOT NULL;
CREATE INDEX orders_open_wake_at ON orders (wake_at) WHERE state = 'pending_payment';
CREATE INDEX orders_open_close_at ON orders (close_at) WHERE state = 'pending_payment';
ALTER TABLE orders DROP CONSTRAINT orders_close_reason_check;
ALTER TABLE orders ADD CONSTRAINT orders_close_reason_check
    CHECK (close_reason IS NULL OR close_reason IN ('payment_timeout', 'buyer_cancelled'));
ALTER TABLE orders DROP CONSTRAINT orders_state_check;
ALTER TABLE orders ADD CONSTRAINT orders_state_check
    CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded'));
