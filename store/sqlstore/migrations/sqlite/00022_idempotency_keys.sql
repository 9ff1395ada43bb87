-- Answers kept for requests sent with an Idempotency-Key (package idempotency).
--
-- idempotency_keys: one row per key and scope (id, the SHA-256 of both). A request claims
-- its row before it runs (status 0, in flight until locked_until) and stores its answer
-- after; the same request sent again gets that answer, another request under the same key
-- is refused. Rows are deleted by the idempotency_retention job once past expires_at.

-- +goose Up
CREATE TABLE idempotency_keys (
    id           TEXT    NOT NULL PRIMARY KEY CHECK (length(id) = 64),
    request_hash TEXT    NOT NULL CHECK (length(request_hash) = 64),
    owner        TEXT    NOT NULL,
    status       INTEGER NOT NULL CHECK (status = 0 OR status BETWEEN 200 AND 599),
    content_type TEXT    NOT NULL,
    location     TEXT    NOT NULL,
    body         BLOB,
    created_at   INTEGER NOT NULL,
    locked_until INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
