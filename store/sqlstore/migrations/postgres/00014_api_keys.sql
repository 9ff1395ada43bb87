-- API keys (README.md "API keys").
--
-- api_keys: one row per key. A key reads ok_<id>_<secret>; only the SHA-256 digest of the
-- secret is kept (hash, 64 lower-case hex digits), never the secret. scopes is a
-- comma-separated list of buyer, merchant, admin. A revoked key keeps its row (revoked_at
-- set): the audit of who had access stays, and a key, once any was created, keeps the API
-- closed even when every key is revoked.

-- +goose Up
CREATE TABLE api_keys (
    id           TEXT   PRIMARY KEY,
    name         TEXT   NOT NULL,
    scopes       TEXT   NOT NULL CHECK (length(scopes) > 0),
    hash         TEXT   NOT NULL CHECK (length(hash) = 64),
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT,
    revoked_at   BIGINT
);

-- +goose Down
DROP TABLE api_keys;
