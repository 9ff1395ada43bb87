-- The simulated channel's card holds (package channel/sim), kept in the database so that
-- every instance sees the holds the others placed and a killed instance loses none; only
-- databases that serve the channel "sim" have them (version table goose_sim_version).
-- A hold is pending until it is captured (posted: captured <= amount, the rest released),
-- voided or expired (released in full), once; refunded never exceeds what it captured.
-- sim_hold_keys records what each capture, void or refund key applied (the same key again
-- is a replay and moves nothing); sim_gateway_faults counts the armed "apply, then time
-- out" faults per operation (Gateway.TimeoutAfterApply, a test tool).
--
-- Main migration 00016 created the same tables in every database before they moved here;
-- IF NOT EXISTS keeps such a database's holds.

-- +goose Up
CREATE TABLE IF NOT EXISTS sim_holds (
    id          TEXT NOT NULL PRIMARY KEY,
    amount      INTEGER NOT NULL CHECK (amount > 0),
    captured    INTEGER NOT NULL DEFAULT 0 CHECK (captured >= 0),
    released    INTEGER NOT NULL DEFAULT 0 CHECK (released >= 0),
    refunded    INTEGER NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    state       TEXT NOT NULL CHECK (state IN ('pending', 'posted', 'voided', 'expired')),
    expires_at  INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    resolved_at INTEGER,
    CONSTRAINT sim_holds_capture_check CHECK (captured + released <= amount),
    CONSTRAINT sim_holds_refund_check CHECK (refunded <= captured)
);

CREATE TABLE IF NOT EXISTS sim_hold_keys (
    idempotency_key TEXT NOT NULL PRIMARY KEY,
    hold_id         TEXT NOT NULL,
    op              TEXT NOT NULL CHECK (op IN ('capture_hold', 'void_hold', 'refund')),
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    created_at      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sim_hold_keys_hold ON sim_hold_keys (hold_id, created_at);

CREATE TABLE IF NOT EXISTS sim_gateway_faults (
    op        TEXT NOT NULL PRIMARY KEY,
    remaining INTEGER NOT NULL CHECK (remaining >= 0)
);

-- +goose Down
DROP TABLE sim_gateway_faults;
DROP TABLE sim_hold_keys;
DROP TABLE sim_holds;
