-- Extra captures, pay-status changes in the audit trail, and refused payment callbacks.
--
-- payments.duplicate_of: a provider may capture one attempt twice (two channel
-- transactions); the second capture is recorded as its own payments row, linked to the
-- attempt it duplicates, and refunded.
-- order_transitions.pay_status_from / pay_status_to: every change of an order's state or
-- pay_status is an audit row; rows with from_state = to_state record a pay_status change.
-- callback_refusals: every signed payment callback that was refused (amount, currency or
-- order mismatch, unknown payment, …), kept so that money a provider says it took and we
-- did not apply is visible to an operator.

-- +goose Up
ALTER TABLE payments ADD COLUMN duplicate_of TEXT;

ALTER TABLE order_transitions ADD COLUMN pay_status_from TEXT NOT NULL DEFAULT ''
    CHECK (pay_status_from IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded'));
ALTER TABLE order_transitions ADD COLUMN pay_status_to TEXT NOT NULL DEFAULT ''
    CHECK (pay_status_to IN ('', 'unpaid', 'paying', 'paid', 'failed', 'refunded'));

CREATE TABLE callback_refusals (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_id     TEXT    NOT NULL, -- as the callback named it: may be unknown
    order_id       TEXT    NOT NULL,
    reason         TEXT    NOT NULL CHECK (reason IN ('invalid_input', 'invalid_status', 'unknown_payment', 'order_mismatch',
                                                      'amount_mismatch', 'currency_mismatch', 'channel_txn_conflict')),
    detail         TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    amount         INTEGER NOT NULL,
    currency       TEXT    NOT NULL,
    channel_txn_id TEXT    NOT NULL,
    body           TEXT    NOT NULL, -- the signed body, truncated to 64 KiB
    created_at     INTEGER NOT NULL
);
CREATE INDEX callback_refusals_payment_id ON callback_refusals (payment_id, id);
CREATE INDEX callback_refusals_order_id ON callback_refusals (order_id, id);

-- +goose Down
DROP TABLE callback_refusals;
ALTER TABLE order_transitions DROP COLUMN pay_status_to;
ALTER TABLE order_transitions DROP COLUMN pay_status_from;
ALTER TABLE payments DROP COLUMN duplicate_of;
