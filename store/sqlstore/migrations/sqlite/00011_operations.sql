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
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    operator TEXT    NOT NULL CHECK (operator <> ''),
    action   TEXT    NOT NULL CHECK (action <> ''),
    target   TEXT    NOT NULL,
    reason   TEXT    NOT NULL DEFAULT '',
    detail   TEXT    NOT NULL DEFAULT '{}',
    trace_id TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX operator_actions_target ON operator_actions (target, id);

CREATE TABLE reconcile_reports (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    instance    TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    findings    INTEGER NOT NULL CHECK (findings >= 0),
    repaired    INTEGER NOT NULL CHECK (repaired >= 0 AND repaired <= findings),
    report      TEXT    NOT NULL
);

CREATE INDEX orders_user_id ON orders (user_id, id);
CREATE INDEX orders_state_id ON orders (state, id);
-- The per-SKU ledger of reconciliation (held and sold recomputed from reservations).
CREATE INDEX reservations_sku_state ON reservations (sku, state);

-- +goose Down
DROP INDEX reservations_sku_state;
DROP INDEX orders_state_id;
DROP INDEX orders_user_id;
DROP TABLE reconcile_reports;
DROP TABLE operator_actions;
