-- Leases of periodic jobs (one runner at a time across instances, fenced by token) and
-- the record of every job run.

-- +goose Up
CREATE TABLE leases (
    name       VARCHAR(64)  NOT NULL PRIMARY KEY,
    owner      VARCHAR(128) NOT NULL,
    token      BIGINT       NOT NULL CHECK (token >= 0),
    expires_at BIGINT       NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE job_runs (
    id          BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    job         VARCHAR(64)   NOT NULL,
    instance    VARCHAR(128)  NOT NULL,
    token       BIGINT        NOT NULL,
    started_at  BIGINT        NOT NULL,
    finished_at BIGINT        NOT NULL,
    scanned     BIGINT        NOT NULL,
    changed     BIGINT        NOT NULL,
    error       VARCHAR(2000) NOT NULL DEFAULT '',
    INDEX job_runs_job_id (job, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE job_runs;
DROP TABLE leases;
