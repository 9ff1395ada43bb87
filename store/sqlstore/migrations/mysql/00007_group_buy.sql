-- Group-buy (README.md "Group-buy"): deals, their groups and the groups' members. A member
-- is an ordinary order of flow group_buy plus a row here. The group table is deal_groups:
-- GROUPS is a reserved word in MySQL 8.
--
-- A group's deadline is a timed state: wake_at is set (to deadline_at) exactly while the
-- group is forming, NULL otherwise, and the closer claims forming groups by it as it
-- claims orders. The group row is the lock of its seats and of its success or failure.
-- Seats are counted from group_members (seat_user_id is the user while the seat is held,
-- NULL once given up; a unique index ignores NULLs), so freeing a seat changes the member
-- row only, never the group row.

-- +goose Up
CREATE TABLE deals (
    id                        VARCHAR(128) NOT NULL PRIMARY KEY,
    sku                       VARCHAR(128) NOT NULL,
    group_price               BIGINT       NOT NULL CHECK (group_price > 0),
    currency                  CHAR(3)      NOT NULL,
    min_members               BIGINT       NOT NULL CHECK (min_members >= 2),
    max_members               BIGINT       NOT NULL,
    group_time_limit_ms       BIGINT       NOT NULL CHECK (group_time_limit_ms > 0),
    member_payment_timeout_ms BIGINT       NOT NULL CHECK (member_payment_timeout_ms > 0),
    created_at                BIGINT       NOT NULL,
    CONSTRAINT deals_members_check CHECK (max_members >= min_members),
    CONSTRAINT deals_timeout_check CHECK (member_payment_timeout_ms <= group_time_limit_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE deal_groups (
    id             VARCHAR(128) NOT NULL PRIMARY KEY,
    deal_id        VARCHAR(128) NOT NULL,
    state          VARCHAR(16)  NOT NULL CHECK (state IN ('forming', 'succeeded', 'failed')),
    leader_user_id VARCHAR(128) NOT NULL,
    min_members    BIGINT       NOT NULL,
    max_members    BIGINT       NOT NULL,
    deadline_at    BIGINT       NOT NULL,
    wake_at        BIGINT,
    created_at     BIGINT       NOT NULL,
    succeeded_at   BIGINT,
    failed_at      BIGINT,
    paid_members   BIGINT       NOT NULL DEFAULT 0 CHECK (paid_members >= 0),
    version        BIGINT       NOT NULL DEFAULT 1,
    CONSTRAINT deal_groups_paid_check CHECK (paid_members <= max_members),
    CONSTRAINT deal_groups_wake_check CHECK ((state = 'forming') = (wake_at IS NOT NULL)),
    CONSTRAINT deal_groups_succeeded_check CHECK ((state = 'succeeded') = (succeeded_at IS NOT NULL)),
    CONSTRAINT deal_groups_failed_check CHECK ((state = 'failed') = (failed_at IS NOT NULL)),
    INDEX deal_groups_wake_at (wake_at),
    INDEX deal_groups_deal_id (deal_id),
    CONSTRAINT deal_groups_deal FOREIGN KEY (deal_id) REFERENCES deals (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE group_members (
    order_id     VARCHAR(128) NOT NULL PRIMARY KEY,
    group_id     VARCHAR(128) NOT NULL,
    user_id      VARCHAR(128) NOT NULL,
    seat_user_id VARCHAR(128),
    joined_at    BIGINT       NOT NULL,
    left_at      BIGINT,
    CONSTRAINT group_members_seat_check CHECK ((left_at IS NULL) = (seat_user_id IS NOT NULL)),
    CONSTRAINT group_members_seat_user_check CHECK (seat_user_id IS NULL OR seat_user_id = user_id),
    UNIQUE INDEX group_members_seat (group_id, seat_user_id),
    INDEX group_members_group_id (group_id, joined_at),
    CONSTRAINT group_members_order FOREIGN KEY (order_id) REFERENCES orders (id),
    CONSTRAINT group_members_group FOREIGN KEY (group_id) REFERENCES deal_groups (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE group_members;
DROP TABLE deal_groups;
DROP TABLE deals;
