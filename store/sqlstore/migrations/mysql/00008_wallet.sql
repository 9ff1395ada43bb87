-- Wallets (package wallet): accounts with balances kept as columns, a double-entry ledger
-- (transfers of two or more entries summing to zero) and holds (two-phase money).
--
-- An account's available and held balances equal the sums of its entries per bucket (verify
-- checks it); a user account's balances are never negative (the CHECK is the last line of
-- defence: the guarded UPDATE refuses first). A hold's expiry is a timed state: wake_at is
-- set (to expires_at) exactly while the hold is pending, and the closer claims pending
-- holds by it as it claims orders. A UNIQUE index ignores NULLs: expiries have no
-- idempotency key. A transfer is written before the balances it moves (its idempotency key
-- first), so its account_id has no foreign key: its entries have.

-- +goose Up
CREATE TABLE wallet_accounts (
    id         VARCHAR(300) NOT NULL PRIMARY KEY,
    kind       VARCHAR(16)  NOT NULL CHECK (kind IN ('user', 'system')),
    owner      VARCHAR(255) NOT NULL,
    currency   CHAR(3)      NOT NULL,
    available  BIGINT       NOT NULL DEFAULT 0,
    held       BIGINT       NOT NULL DEFAULT 0 CHECK (held >= 0),
    version    BIGINT       NOT NULL DEFAULT 1,
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    CONSTRAINT wallet_accounts_available_check CHECK (kind = 'system' OR available >= 0),
    INDEX wallet_accounts_owner (owner, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_transfers (
    id              VARCHAR(128) NOT NULL PRIMARY KEY,
    kind            VARCHAR(16)  NOT NULL CHECK (kind IN ('credit', 'debit', 'hold', 'post', 'void', 'expire', 'refund')),
    idempotency_key VARCHAR(255),
    account_id      VARCHAR(300) NOT NULL,
    counterparty_id VARCHAR(300),
    currency        CHAR(3)      NOT NULL,
    amount          BIGINT       NOT NULL CHECK (amount >= 0),
    hold_id         VARCHAR(128),
    refund_of       VARCHAR(128),
    refunded        BIGINT       NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    created_at      BIGINT       NOT NULL,
    CONSTRAINT wallet_transfers_refunded_check CHECK (refunded <= amount),
    CONSTRAINT wallet_transfers_key_check CHECK (kind = 'expire' OR idempotency_key IS NOT NULL),
    UNIQUE INDEX wallet_transfers_key (idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_entries (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    transfer_id VARCHAR(128) NOT NULL,
    account_id  VARCHAR(300) NOT NULL,
    bucket      VARCHAR(16)  NOT NULL CHECK (bucket IN ('available', 'held')),
    amount      BIGINT       NOT NULL CHECK (amount <> 0),
    created_at  BIGINT       NOT NULL,
    INDEX wallet_entries_account (account_id, id),
    INDEX wallet_entries_transfer (transfer_id),
    CONSTRAINT wallet_entries_transfer_fk FOREIGN KEY (transfer_id) REFERENCES wallet_transfers (id),
    CONSTRAINT wallet_entries_account_fk FOREIGN KEY (account_id) REFERENCES wallet_accounts (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE wallet_holds (
    id          VARCHAR(128) NOT NULL PRIMARY KEY,
    account_id  VARCHAR(300) NOT NULL,
    currency    CHAR(3)      NOT NULL,
    amount      BIGINT       NOT NULL CHECK (amount > 0),
    captured    BIGINT       NOT NULL DEFAULT 0 CHECK (captured >= 0),
    state       VARCHAR(16)  NOT NULL CHECK (state IN ('pending', 'posted', 'voided', 'expired')),
    expires_at  BIGINT       NOT NULL,
    wake_at     BIGINT,
    created_at  BIGINT       NOT NULL,
    resolved_at BIGINT,
    CONSTRAINT wallet_holds_captured_check CHECK (captured <= amount),
    CONSTRAINT wallet_holds_posted_check CHECK ((state = 'posted') = (captured > 0)),
    CONSTRAINT wallet_holds_wake_check CHECK ((state = 'pending') = (wake_at IS NOT NULL)),
    CONSTRAINT wallet_holds_resolved_check CHECK ((state = 'pending') = (resolved_at IS NULL)),
    INDEX wallet_holds_wake_at (wake_at),
    CONSTRAINT wallet_holds_transfer FOREIGN KEY (id) REFERENCES wallet_transfers (id),
    CONSTRAINT wallet_holds_account FOREIGN KEY (account_id) REFERENCES wallet_accounts (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE wallet_holds;
DROP TABLE wallet_entries;
DROP TABLE wallet_transfers;
DROP TABLE wallet_accounts;
