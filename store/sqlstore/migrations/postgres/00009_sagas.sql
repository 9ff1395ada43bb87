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
    current_step       BIGINT NOT NULL CHECK (current_step >= -1),
    input              TEXT   NOT NULL,
    wake_at            BIGINT,
    step_deadline      BIGINT,
    attempts           BIGINT NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    attempt_started_at BIGINT,
    last_error         TEXT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    ended_at           BIGINT,
    version            BIGINT NOT NULL DEFAULT 1,
    CHECK ((state IN ('running', 'compensating')) = (wake_at IS NOT NULL)),
    CHECK ((state IN ('succeeded', 'compensated')) = (ended_at IS NOT NULL))
);
CREATE INDEX saga_instances_wake_at ON saga_instances (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX saga_instances_stuck ON saga_instances (id) WHERE state = 'stuck';

CREATE TABLE saga_steps (
    id              BIGSERIAL PRIMARY KEY,
    saga_id         TEXT   NOT NULL REFERENCES saga_instances (id),
    step            BIGINT NOT NULL CHECK (step >= 0),
    step_name       TEXT   NOT NULL,
    phase           TEXT   NOT NULL CHECK (phase IN ('action', 'compensation')),
    attempt         BIGINT NOT NULL CHECK (attempt >= 1),
    outcome         TEXT   NOT NULL CHECK (outcome IN ('succeeded', 'business_failure', 'transient', 'unknown', 'lost')),
    idempotency_key TEXT   NOT NULL,
    started_at      BIGINT NOT NULL,
    ended_at        BIGINT NOT NULL,
    retry_at        BIGINT,
    error           TEXT
);
CREATE INDEX saga_steps_saga_id ON saga_steps (saga_id, id);

CREATE TABLE saga_barrier (
    saga_id    TEXT   NOT NULL,
    step       TEXT   NOT NULL,
    op         TEXT   NOT NULL CHECK (op IN ('action', 'compensation')),
    reason     TEXT   NOT NULL CHECK (reason IN ('action', 'compensation')),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (saga_id, step, op)
);

-- +goose Down
DROP TABLE saga_barrier;
DROP TABLE saga_steps;
DROP TABLE saga_instances;
