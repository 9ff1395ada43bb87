-- Role accounts (kind 'role': the ride platform's fees, a driver's payouts) live in a
-- namespace of their own, "role:<currency>:<name>", out of the buyers' reach: before, they
-- were user wallets, and a buyer who named user_id "ride_platform" spent the platform's
-- fees. wallet_accounts.kind gains 'role'; like a user's, a role account never goes below
-- zero.
--
-- SQLite cannot change a CHECK constraint in place: wallet_accounts is rebuilt
-- (https://www.sqlite.org/lang_altertable.html#otheralter). Foreign keys (wallet_entries)
-- must be off while it is swapped, and that pragma has no effect inside a transaction, so
-- this migration runs outside goose's transaction and opens its own.

-- +goose NO TRANSACTION
-- +goose Up
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE wallet_accounts_new (
    id         TEXT PRIMARY KEY,
    kind       TEXT    NOT NULL CHECK (kind IN ('user', 'system', 'role')),
    owner      TEXT    NOT NULL,
    currency   TEXT    NOT NULL,
    available  INTEGER NOT NULL DEFAULT 0,
    held       INTEGER NOT NULL DEFAULT 0 CHECK (held >= 0),
    version    INTEGER NOT NULL DEFAULT 1,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK (kind = 'system' OR available >= 0)
);
INSERT INTO wallet_accounts_new (id, kind, owner, currency, available, held, version, created_at, updated_at)
SELECT id, kind, owner, currency, available, held, version, created_at, updated_at FROM wallet_accounts;
DROP TABLE wallet_accounts;
ALTER TABLE wallet_accounts_new RENAME TO wallet_accounts;
CREATE INDEX wallet_accounts_owner ON wallet_accounts (owner, id);
COMMIT;
PRAGMA foreign_keys = ON;

-- +goose Down
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;
CREATE TABLE wallet_accounts_old (
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
-- A role account goes back to being a user wallet of the same owner (its id keeps its
-- prefix: the entries name it).
INSERT INTO wallet_accounts_old (id, kind, owner, currency, available, held, version, created_at, updated_at)
SELECT id, CASE kind WHEN 'role' THEN 'user' ELSE kind END, owner, currency, available, held, version, created_at, updated_at
FROM wallet_accounts;
DROP TABLE wallet_accounts;
ALTER TABLE wallet_accounts_old RENAME TO wallet_accounts;
CREATE INDEX wallet_accounts_owner ON wallet_accounts (owner, id);
COMMIT;
PRAGMA foreign_keys = ON;
