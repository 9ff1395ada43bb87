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
    id                 VARCHAR(128) NOT NULL PRIMARY KEY,
    definition         VARCHAR(128) NOT NULL,
    state              VARCHAR(16)  NOT NULL CHECK (state IN ('running', 'compensating', 'succeeded', 'compensated', 'stuck')),
    current_step       BIGINT       NOT NULL CHECK (current_step >= -1),
    input              LONGTEXT     NOT NULL,
    wake_at            BIGINT,
    step_deadline      BIGINT,
    attempts           BIGINT       NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    attempt_started_at BIGINT,
    last_error         TEXT,
    created_at         BIGINT       NOT NULL,
    updated_at         BIGINT       NOT NULL,
    ended_at           BIGINT,
    version            BIGINT       NOT NULL DEFAULT 1,
    CONSTRAINT saga_instances_wake_check CHECK ((state IN ('running', 'compensating')) = (wake_at IS NOT NULL)),
    CONSTRAINT saga_instances_ended_check CHECK ((state IN ('succeeded', 'compensated')) = (ended_at IS NOT NULL)),
    INDEX saga_instances_wake_at (wake_at),
    INDEX saga_instances_state (state, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE saga_steps (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    saga_id         VARCHAR(128) NOT NULL,
    step            BIGINT       NOT NULL CHECK (step >= 0),
    step_name       VARCHAR(128) NOT NULL,
    phase           VARCHAR(16)  NOT NULL CHECK (phase IN ('action', 'compensation')),
    attempt         BIGINT       NOT NULL CHECK (attempt >= 1),
    outcome         VARCHAR(16)  NOT NULL CHECK (outcome IN ('succeeded', 'business_failure', 'transient', 'unknown', 'lost')),
    idempotency_key VARCHAR(400) NOT NULL,
    started_at      BIGINT       NOT NULL,
    ended_at        BIGINT       NOT NULL,
    retry_at        BIGINT,
    error           TEXT,
    INDEX saga_steps_saga_id (saga_id, id),
    CONSTRAINT saga_steps_saga FOREIGN KEY (saga_id) REFERENCES saga_instances (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE saga_barrier (
    saga_id    VARCHAR(128) NOT NULL,
    step       VARCHAR(128) NOT NULL,
    op         VARCHAR(16)  NOT NULL CHECK (op IN ('action', 'compensation')),
    reason     VARCHAR(16)  NOT NULL CHECK (reason IN ('action', 'compensation')),
    created_at BIGINT       NOT NULL,
    PRIMARY KEY (saga_id, step, op)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE saga_barrier;
DROP TABLE saga_steps;
DROP TABLE saga_instances;
