-- Operations (README.md "Operations"): the audit of operator actions and the reports of
-- reconciliation runs, plus the indexes of the admin order search.
--
-- operator_actions records every change an operator or a repair makes outside the normal
-- flow of orders: a dead letter re-driven or discarded, a reconciliation repair, a stock
-- correction. operator is a name (the Orderly-Operator header, "admin", "reconcile"),
-- action a verb (redrive, discard, repair:<finding kind>), target what it changed (an
-- outbox message id, an order id, a SKU), reason why (required for a discard), detail a
-- JSON object of what was seen and done.

-- +goose Up
CREATE TABLE operator_actions (
    id       BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at       BIGINT        NOT NULL,
    operator VARCHAR(128)  NOT NULL CHECK (operator <> ''),
    action   VARCHAR(64)   NOT NULL CHECK (action <> ''),
    target   VARCHAR(128)  NOT NULL,
    reason   VARCHAR(2000) NOT NULL DEFAULT '',
    detail   MEDIUMTEXT    NOT NULL,
    trace_id VARCHAR(64)   NOT NULL DEFAULT '',
    INDEX operator_actions_target (target, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE reconcile_reports (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    instance    VARCHAR(128) NOT NULL,
    started_at  BIGINT       NOT NULL,
    finished_at BIGINT       NOT NULL,
    findings    BIGINT       NOT NULL CHECK (findings >= 0),
    repaired    BIGINT       NOT NULL,
    report      MEDIUMTEXT   NOT NULL,
    CONSTRAINT reconcile_reports_repaired_check CHECK (repaired >= 0 AND repaired <= findings)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE INDEX orders_user_id ON orders (user_id, id);
CREATE INDEX orders_state_id ON orders (state, id);
-- The per-SKU ledger of reconciliation (held and sold recomputed from reservations).
CREATE INDEX reservations_sku_state ON reservations (sku, state);

-- +goose Down
DROP INDEX reservations_sku_state ON reservations;
DROP INDEX orders_state_id ON orders;
DROP INDEX orders_user_id ON orders;
DROP TABLE reconcile_reports;
DROP TABLE operator_actions;
