-- Group-buy (README.md "Group-buy"): deals, their groups and the groups' members. A member
-- is an ordinary order of flow group_buy plus a row here. The group table is deal_groups:
-- GROUPS is a reserved word in MySQL 8.
--
-- A group's deadline is a timed state: wake_at is set (to deadline_at) exactly while the
-- group is forming, NULL otherwise, and the closer claims forming groups by it as it
-- claims orders. The group row is the lock of its seats and of its success or failure.
-- Seats are counted from group_members (seat_user_id is the user while the seat is held,
-- NULL once given up), so freeing a seat changes the member row only, never the group row.

-- +goose Up
CREATE TABLE deals (
    id                        TEXT PRIMARY KEY,
    sku                       TEXT   NOT NULL,
    group_price               BIGINT NOT NULL CHECK (group_price > 0),
    currency                  TEXT   NOT NULL,
    min_members               BIGINT NOT NULL CHECK (min_members >= 2),
    max_members               BIGINT NOT NULL,
    group_time_limit_ms       BIGINT NOT NULL CHECK (group_time_limit_ms > 0),
    member_payment_timeout_ms BIGINT NOT NULL CHECK (member_payment_timeout_ms > 0),
    created_at                BIGINT NOT NULL,
    CHECK (max_members >= min_members),
    CHECK (member_payment_timeout_ms <= group_time_limit_ms)
);

CREATE TABLE deal_groups (
    id             TEXT PRIMARY KEY,
    deal_id        TEXT   NOT NULL REFERENCES deals (id),
    state          TEXT   NOT NULL CHECK (state IN ('forming', 'succeeded', 'failed')),
    leader_user_id TEXT   NOT NULL,
    min_members    BIGINT NOT NULL,
    max_members    BIGINT NOT NULL,
    deadline_at    BIGINT NOT NULL,
    wake_at        BIGINT,
    created_at     BIGINT NOT NULL,
    succeeded_at   BIGINT,
    failed_at      BIGINT,
    paid_members   BIGINT NOT NULL DEFAULT 0 CHECK (paid_members >= 0),
    version        BIGINT NOT NULL DEFAULT 1,
    CHECK (paid_members <= max_members),
    CHECK ((state = 'forming') = (wake_at IS NOT NULL)),
    CHECK ((state = 'succeeded') = (succeeded_at IS NOT NULL)),
    CHECK ((state = 'failed') = (failed_at IS NOT NULL))
);
CREATE INDEX deal_groups_wake_at ON deal_groups (wake_at) WHERE wake_at IS NOT NULL;
CREATE INDEX deal_groups_deal_id ON deal_groups (deal_id);

CREATE TABLE group_members (
    order_id     TEXT PRIMARY KEY REFERENCES orders (id),
    group_id     TEXT   NOT NULL REFERENCES deal_groups (id),
    user_id      TEXT   NOT NULL,
    seat_user_id TEXT,
    joined_at    BIGINT NOT NULL,
    left_at      BIGINT,
    CHECK ((left_at IS NULL) = (seat_user_id IS NOT NULL)),
    CHECK (seat_user_id IS NULL OR seat_user_id = user_id),
    UNIQUE (group_id, seat_user_id)
);
CREATE INDEX group_members_group_id ON group_members (group_id, joined_at);

-- +goose Down
DROP TABLE group_members;
DROP TABLE deal_groups;
DROP TABLE deals;
