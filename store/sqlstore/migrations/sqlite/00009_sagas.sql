-- Sagas (README.md "Sagas"): saga instances, their step log, and the barrier table of local
-- participants (package barrier).
--
-- An instance's current step waits on the one timer: wake_at is set exactly while the saga
-- is running or compensating, and is the time the closer next looks at it: now (runnable),
-- a retry time, or the end of the lease of an attempt in flight (a crashed runner's step
-- becomes due again then). version is the fencing token of an attempt: every change bumps
-- it, and a runner records an outcome only while the version it claimed is current.

-- +goose Up
CREATE TABLE saga_instances (
    id                 TEXT PRIMARY KEY,
    definition         TEXT   NOT NULL,
    state              TEXT   NOT NULL CHECK (state IN ('running', 'compensating', 'succeeded', 'compensated', 'stuck')),
    current_step       INTEGER NOT NULL CHECK (current_step >= -1),
    input              TEXT   NOT NULL,
    wake_at            INTEGER,
    step_deadline      INTEGER,
    attempts           INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    attempt_started_at INTEGER,
    last_error         TEXT,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    ended_at           INTEGER,
    version            INTEGER NOT NULL DEFAULT 1,
    CHECK ((state IN ('running', 'compensating')) = (wake_at IS NOT NULL)),
    CHECK ((state IN ('succeeded', 'compensated')) = (ended_at IS NOT NULL))
);
CREATE INDEX saga_instances_wake_at ON saga_instances (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX saga_instances_stuck ON saga_instances (id) WHERE state = 'stuck';

CREATE TABLE saga_steps (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id         TEXT   NOT NULL REFERENCES saga_instances (id),
    step            INTEGER NOT NULL CHECK (step >= 0),
    step_name       TEXT   NOT NULL,
    phase           TEXT   NOT NULL CHECK (phase IN ('action', 'compensation')),
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    outcome         TEXT   NOT NULL CHECK (outcome IN ('succeeded', 'business_failure', 'transient', 'unknown', 'lost')),
    idempotency_key TEXT   NOT NULL,
    started_at      INTEGER NOT NULL,
    ended_at        INTEGER NOT NULL,
    retry_at        INTEGER,
    error           TEXT
);
CREATE INDEX saga_steps_saga_id ON saga_steps (saga_id, id);

CREATE TABLE saga_barrier (
    saga_id    TEXT   NOT NULL,
    step       TEXT   NOT NULL,
    op         TEXT   NOT NULL CHECK (op IN ('action', 'compensation')),
    reason     TEXT   NOT NULL CHECK (reason IN ('action', 'compensation')),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (saga_id, step, op)
);

-- +goose Down
DROP TABLE saga_barrier;
DROP TABLE saga_steps;
DROP TABLE saga_instances;
