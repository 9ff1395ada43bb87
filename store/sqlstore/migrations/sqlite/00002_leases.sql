-- Leases of periodic jobs (one runner at a time across instances, fenced by token) and
-- the record of every job run.

-- +goose Up
CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token      INTEGER NOT NULL CHECK (token >= 0), -- fencing token: +1 on every change of owner
    expires_at INTEGER NOT NULL
);

CREATE TABLE job_runs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job         TEXT    NOT NULL,
    instance    TEXT    NOT NULL,
    token       INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    scanned     INTEGER NOT NULL,
    changed     INTEGER NOT NULL,
    error       TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX job_runs_job_id ON job_runs (job, id);

-- +goose Down
DROP TABLE job_runs;
DROP TABLE leases;
