-- Extra captures, pay-status changes in the audit trail, and refused payment callbacks.
--
-- payments.duplicate_of: a provider may capture one attempt twice (two channel
-- transactions); the second capture is recorded as its own payments row, linked to the
-- attempt it duplicates, and refunded.
-- order_transitions.pay_status_from / pay_status_to: every change of an order's state or
-- pay_status is an audit row; rows with from_state = to_state record a pay_status change.
-- callback_refusals: every signed payment callback that was refused (amount, currency or
-- order mismatch, unknown payment, …), kept so that money a provider says it took and we
-- did not apply is visible to an operator. Strings are truncated to the column sizes by
-- the store.

-- +goose Up
ALTER TABLE payments ADD COLUMN duplicate_of VARCHAR(128);

ALTER TABLE order_transitions
    ADD COLUMN pay_status_from VARCHAR(16) NOT NULL DEFAULT ''
        CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded')),
    ADD COLUMN pay_status_to VARCHAR(16) NOT NULL DEFAULT ''
        CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded'));

CREATE TABLE callback_refusals (
    id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    payment_id     VARCHAR(255) NOT NULL,
    order_id       VARCHAR(255) NOT NULL,
    reason         VARCHAR(32)  NOT NULL CHECK (reason IN ('invalid_input', 'invalid_status', 'unknown_payment', 'order_mismatch',
                                                           'amount_mismatch', 'currency_mismatch', 'channel_txn_conflict')),
    detail         VARCHAR(1000) NOT NULL,
    status         VARCHAR(64)  NOT NULL,
    amount         BIGINT       NOT NULL,
    currency       VARCHAR(16)  NOT NULL,
    channel_txn_id VARCHAR(255) NOT NULL,
    body           MEDIUMTEXT   NOT NULL,
    created_at     BIGINT       NOT NULL,
    INDEX callback_refusals_payment_id (payment_id, id),
    INDEX callback_refusals_order_id (order_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE callback_refusals;
ALTER TABLE order_transitions DROP COLUMN pay_status_to, DROP COLUMN pay_status_from;
ALTER TABLE payments DROP COLUMN duplicate_of;
