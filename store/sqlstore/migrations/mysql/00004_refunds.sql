-- Refunds as shops expect them: full and partial, from paid, shipped and completed, several
-- per order up to the captured amount and never beyond it. orders.refunded_amount is the
-- sum of the order's refunds that are requested or succeeded: the guarded UPDATE that adds
-- to it is what keeps concurrent refunds within the captured amount, and its CHECK is the
-- backstop. reservations.refunded / restocked count the units of a sold reservation that
-- refunds covered and that went back to available stock.
--
-- The pay_status lists of orders and of the audit trail (order_transitions.pay_status_from
-- and pay_status_to) gain partially_refunded, 18 characters: the columns widen to 32. Each
-- CHECK was declared on its column: MariaDB keeps it with the column, and MODIFY drops it;
-- MySQL 8 keeps it as a table constraint named <table>_chk_N, which is looked up and
-- dropped by name after the new one is added under a fixed name (a no-op DO 0 where none
-- is left). One ALTER per table: each rebuilds it.

-- +goose Up
ALTER TABLE order_transitions
    MODIFY pay_status_from VARCHAR(32) NOT NULL DEFAULT '',
    MODIFY pay_status_to VARCHAR(32) NOT NULL DEFAULT '',
    ADD CONSTRAINT order_transitions_pay_status_from_check
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    ADD CONSTRAINT order_transitions_pay_status_to_check
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded'));
SET @drop_pay_status_from_check = COALESCE((
    SELECT CONCAT('ALTER TABLE order_transitions DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'order_transitions' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%pay_status_from%' AND tc.CONSTRAINT_NAME <> 'order_transitions_pay_status_from_check'
    LIMIT 1), 'DO 0');
PREPARE drop_pay_status_from_check FROM @drop_pay_status_from_check;
EXECUTE drop_pay_status_from_check;
DEALLOCATE PREPARE drop_pay_status_from_check;
SET @drop_pay_status_to_check = COALESCE((
    SELECT CONCAT('ALTER TABLE order_transitions DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'order_transitions' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%pay_status_to%' AND tc.CONSTRAINT_NAME <> 'order_transitions_pay_status_to_check'
    LIMIT 1), 'DO 0');
PREPARE drop_pay_status_to_check FROM @drop_pay_status_to_check;
EXECUTE drop_pay_status_to_check;
DEALLOCATE PREPARE drop_pay_status_to_check;
ALTER TABLE orders
    MODIFY pay_status VARCHAR(32) NOT NULL,
    ADD CONSTRAINT orders_pay_status_check
        CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded', 'partially_refunded')),
    ADD COLUMN refunded_amount BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT orders_refunded_amount_check CHECK (refunded_amount >= 0 AND refunded_amount <= amount);
SET @drop_pay_status_check = COALESCE((
    SELECT CONCAT('ALTER TABLE orders DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'orders' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%pay_status%' AND tc.CONSTRAINT_NAME <> 'orders_pay_status_check'
    LIMIT 1), 'DO 0');
PREPARE drop_pay_status_check FROM @drop_pay_status_check;
EXECUTE drop_pay_status_check;
DEALLOCATE PREPARE drop_pay_status_check;

ALTER TABLE reservations
    ADD COLUMN refunded BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN restocked BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT reservations_refunded_check CHECK (refunded >= 0 AND refunded <= quantity),
    ADD CONSTRAINT reservations_restocked_check CHECK (restocked >= 0 AND restocked <= quantity);

CREATE TABLE refunds (
    id              VARCHAR(128) NOT NULL PRIMARY KEY,
    order_id        VARCHAR(128) NOT NULL,
    payment_id      VARCHAR(128) NOT NULL,
    amount          BIGINT       NOT NULL CHECK (amount > 0),
    currency        CHAR(3)      NOT NULL,
    items           MEDIUMTEXT   NOT NULL,
    restock         BOOLEAN      NOT NULL,
    reason          VARCHAR(512) NOT NULL DEFAULT '',
    state           VARCHAR(16)  NOT NULL CHECK (state IN ('requested', 'succeeded', 'failed')),
    fail_reason     VARCHAR(512) NOT NULL DEFAULT '',
    idempotency_key VARCHAR(255),
    request_hash    VARCHAR(64),
    created_at      BIGINT       NOT NULL,
    completed_at    BIGINT,
    CHECK ((state = 'requested') = (completed_at IS NULL)),
    INDEX refunds_order_id (order_id, created_at),
    UNIQUE INDEX refunds_idempotency_key (order_id, idempotency_key),
    FOREIGN KEY (order_id) REFERENCES orders (id),
    FOREIGN KEY (payment_id) REFERENCES payments (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE refunds;
ALTER TABLE order_transitions
    DROP CONSTRAINT order_transitions_pay_status_from_check,
    DROP CONSTRAINT order_transitions_pay_status_to_check,
    ADD CONSTRAINT order_transitions_pay_status_from_check
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded')),
    ADD CONSTRAINT order_transitions_pay_status_to_check
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded'));
ALTER TABLE reservations DROP CONSTRAINT reservations_restocked_check;
ALTER TABLE reservations DROP CONSTRAINT reservations_refunded_check;
ALTER TABLE reservations DROP COLUMN restocked;
ALTER TABLE reservations DROP COLUMN refunded;
ALTER TABLE orders DROP CONSTRAINT orders_refunded_amount_check;
ALTER TABLE orders DROP COLUMN refunded_amount;
ALTER TABLE orders DROP CONSTRAINT orders_pay_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_pay_status_check
    CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded'));
