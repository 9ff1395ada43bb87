-- Wallets (package wallet): accounts with balances kept as columns, a double-entry ledger
-- (transfers of two or more entries summing to zero) and holds (two-phase money).
--
-- An account's available and held balances equal the sums of its entries per bucket (verify
-- checks it); a user account's balances are never negative (the CHECK is the last line of
-- defence: the guarded UPDATE refuses first). A hold's expiry is a timed state: wake_at is
-- set (to expires_at) exactly while the hold is pending, and the closer claims pending
-- holds by it as it claims orders. A transfer is written before the balances it moves (its
-- idempotency key first), so its account_id has no foreign key: its entries have.

-- +goose Up
CREATE TABLE wallet_accounts (
    id         TEXT PRIMARY KEY,
    kind       TEXT    NOT NULL CHECK (kind IN ('user', 'system')),
    owner      TEXT    NOT NULL,
    currency   TEXT    NOT NULL,
    available  INTEGER NOT NULL DEFAULT 0,
    held       INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
    version    INTEGER NOT NULL DEFAULT 1,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (kind = 'system' OR available >= 0)
);
CREATE INDEX wallet_accounts_owner ON wallet_accounts (owner, id);

CREATE TABLE wallet_transfers (
    id              TEXT PRIMARY KEY,
    kind            TEXT    NOT NULL CHECK (kind IN ('credit', 'debit', 'hold', 'post', 'void', 'expire', 'refund')),
    idempotency_key TEXT UNIQUE,
    account_id      TEXT    NOT NULL,
    counterparty_id TEXT,
    currency        TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    hold_id         TEXT,
    refund_of       TEXT,
    refunded        INTEGER NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    created_at      INTEGER NOT NULL,
    CHECK (refunded <= amount),
    CHECK (kind = 'expire' OR idempotency_key IS NOT NULL)
);

CREATE TABLE wallet_entries (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    transfer_id TEXT    NOT NULL REFERENCES wallet_transfers (id),
    account_id  TEXT    NOT NULL REFERENCES wallet_accounts (id),
    bucket      TEXT    NOT NULL CHECK (bucket IN ('available', 'held')),
    amount      INTEGER NOT NULL CHECK (amount <> 0),
    created_at  INTEGER NOT NULL
);
CREATE INDEX wallet_entries_account ON wallet_entries (account_id, id);
CREATE INDEX wallet_entries_transfer ON wallet_entries (transfer_id);

CREATE TABLE wallet_holds (
    id          TEXT PRIMARY KEY REFERENCES wallet_transfers (id),
    account_id  TEXT    NOT NULL REFERENCES wallet_accounts (id),
    currency    TEXT    NOT NULL,
    amount      INTEGER NOT NULL CHECK (amount > 0),
    captured    INTEGER NOT NULL DEFAULT 0 CHECK (captured >= 0),
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'posted', 'voided', 'expired')),
    expires_at  INTEGER NOT NULL,
    wake_at     INTEGER,
    created_at  INTEGER NOT NULL,
    resolved_at INTEGER,
    CHECK (captured <= amount),
    CHECK ((state = 'posted') = (captured > 0)),
    CHECK ((state = 'pending') = (wake_at IS NOT NULL)),
    CHECK ((state = 'pending') = (resolved_at IS NULL))
);
CREATE INDEX wallet_holds_wake_at ON wallet_holds (wake_at) WHERE wake_at IS NOT NULL;

-- +goose Down
DROP TABLE wallet_holds;
DROP TABLE wallet_entries;
DROP TABLE wallet_transfers;
DROP TABLE wallet_accounts;
