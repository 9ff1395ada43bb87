-- Answers kept for requests sent with an Idempotency-Key (package idempotency).
--
-- idempotency_keys: one row per key and scope (id, the SHA-256 of both). A request claims
-- its row before it runs (status 0, in flight until locked_until) and stores its answer
-- after; the same request sent again gets that answer, another request under the same key
-- is refused. Rows are deleted by the idempotency_retention job once past expires_at.

-- +goose Up
CREATE TABLE idempotency_keys (
    id           CHAR(64)      NOT NULL PRIMARY KEY CHECK (CHAR_LENGTH(id) = 64),
    request_hash CHAR(64)      NOT NULL CHECK (CHAR_LENGTH(request_hash) = 64),
    owner        VARCHAR(32)   NOT NULL,
    status       INT           NOT NULL CHECK (status = 0 OR status BETWEEN 200 AND 599),
    content_type VARCHAR(255)  NOT NULL,
    location     VARCHAR(2048) NOT NULL,
    body         MEDIUMBLOB,
    created_at   BIGINT        NOT NULL,
    locked_until BIGINT        NOT NULL,
    expires_at   BIGINT        NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
