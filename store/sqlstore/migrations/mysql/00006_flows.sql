-- Flows as data (README.md "Flows"). Which states and close reasons exist is declared by the
-- flows registered at the composition root (orderly.Flow), not by the schema, so adding a
-- flow needs no change to the orders table: the CHECK lists of orders.state and
-- orders.close_reason go. wake_at now says whether an order waits on a deadline: set (to
-- its deadline, later while its payment is inspected) exactly while the order is in a timed
-- state of its flow, NULL otherwise; the timer, the sweep and the deep check read only the
-- rows that have one, whatever the flow and the state.
--
-- MariaDB names a column's CHECK after the column and drops it with MODIFY; MySQL gives it a
-- generated name and keeps it: the lookups drop it there (and do nothing on MariaDB).

-- +goose Up
ALTER TABLE orders
    MODIFY state VARCHAR(32) NOT NULL,
    MODIFY close_reason VARCHAR(32) NULL,
    MODIFY wake_at BIGINT NULL;
SET @drop_state_check = COALESCE((
    SELECT CONCAT('ALTER TABLE orders DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'orders' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%pending_payment%'
    LIMIT 1), 'DO 0');
PREPARE drop_state_check FROM @drop_state_check;
EXECUTE drop_state_check;
DEALLOCATE PREPARE drop_state_check;
SET @drop_close_reason_check = COALESCE((
    SELECT CONCAT('ALTER TABLE orders DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'orders' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%buyer_cancelled%'
    LIMIT 1), 'DO 0');
PREPARE drop_close_reason_check FROM @drop_close_reason_check;
EXECUTE drop_close_reason_check;
DEALLOCATE PREPARE drop_close_reason_check;
ALTER TABLE orders
    ADD CONSTRAINT orders_state_check CHECK (state <> ''),
    ADD CONSTRAINT orders_close_reason_check CHECK (close_reason IS NULL OR close_reason <> '');
UPDATE orders SET wake_at = NULL WHERE state <> 'pending_payment';
ALTER TABLE orders
    DROP INDEX orders_state_wake_at,
    DROP INDEX orders_state_close_at,
    ADD INDEX orders_wake_at (wake_at);

-- +goose Down
UPDATE orders SET wake_at = close_at WHERE wake_at IS NULL;
ALTER TABLE orders
    DROP INDEX orders_wake_at,
    ADD INDEX orders_state_wake_at (state, wake_at),
    ADD INDEX orders_state_close_at (state, close_at),
    DROP CONSTRAINT orders_state_check,
    DROP CONSTRAINT orders_close_reason_check;
ALTER TABLE orders
    MODIFY wake_at BIGINT NOT NULL,
    ADD CONSTRAINT orders_state_check
        CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    ADD CONSTRAINT orders_close_reason_check
        CHECK (close_reason IS NULL OR close_reason IN ('payment_timeout', 'buyer_cancelled'));
