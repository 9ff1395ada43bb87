-- orderly schema, MySQL 8 / MariaDB 10.6+ dialect. Times are unix milliseconds (UTC,
-- BIGINT) as in every dialect; money is integer minor currency units. Ids and SKUs compare
-- byte for byte (utf8mb4_bin): "sku-a" and "SKU-A" are different SKUs, as in the other
-- dialects. Every state column has a CHECK constraint that mirrors the Go constants in
-- package orderly. MySQL has no partial indexes: composite (state, …) indexes serve the
-- same queries.

-- +goose Up
CREATE TABLE orders (
    id                 VARCHAR(128) NOT NULL PRIMARY KEY,
    user_id            VARCHAR(128) NOT NULL,
    flow               VARCHAR(64)  NOT NULL,
    state              VARCHAR(32)  NOT NULL CHECK (state IN ('pending_payment', 'paid', 'shipped', 'completed', 'closed', 'refunding', 'refunded')),
    pay_status         VARCHAR(16)  NOT NULL CHECK (pay_status IN ('unpaid', 'paying', 'paid', 'failed', 'refunded')),
    items              MEDIUMTEXT   NOT NULL,
    amount             BIGINT       NOT NULL CHECK (amount >= 0),
    currency           CHAR(3)      NOT NULL,
    coupon_id          VARCHAR(128),
    current_payment_id VARCHAR(128),
    created_at         BIGINT       NOT NULL,
    expires_at         BIGINT       NOT NULL,
    close_at           BIGINT       NOT NULL,
    wake_at            BIGINT       NOT NULL,
    closed_at          BIGINT,
    close_reason       VARCHAR(32) CHECK (close_reason IS NULL OR close_reason IN ('payment_timeout', 'buyer_cancelled')),
    paid_at            BIGINT,
    version            BIGINT       NOT NULL DEFAULT 1,
    idempotency_key    VARCHAR(255),
    request_hash       VARCHAR(64),
    CHECK (close_at >= expires_at),
    CHECK ((state = 'closed') = (closed_at IS NOT NULL AND close_reason IS NOT NULL)),
    INDEX orders_state_wake_at (state, wake_at),
    INDEX orders_state_close_at (state, close_at),
    UNIQUE INDEX orders_idempotency_key (user_id, idempotency_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE order_transitions (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    order_id   VARCHAR(128) NOT NULL,
    from_state VARCHAR(32)  NOT NULL,
    to_state   VARCHAR(32)  NOT NULL,
    event      VARCHAR(32)  NOT NULL,
    cause      VARCHAR(512) NOT NULL DEFAULT '',
    actor      VARCHAR(64)  NOT NULL,
    at         BIGINT       NOT NULL,
    trace_id   VARCHAR(64)  NOT NULL DEFAULT '',
    INDEX order_transitions_order_id (order_id, id),
    FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE stock (
    sku       VARCHAR(128) NOT NULL PRIMARY KEY,
    available BIGINT       NOT NULL CHECK (available >= 0),
    held      BIGINT       NOT NULL DEFAULT 0 CHECK (held >= 0),
    sold      BIGINT       NOT NULL DEFAULT 0 CHECK (sold >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE reservations (
    order_id   VARCHAR(128) NOT NULL,
    sku        VARCHAR(128) NOT NULL,
    quantity   BIGINT       NOT NULL CHECK (quantity > 0),
    state      VARCHAR(16)  NOT NULL CHECK (state IN ('held', 'released', 'committed')),
    updated_at BIGINT       NOT NULL,
    PRIMARY KEY (order_id, sku),
    FOREIGN KEY (order_id) REFERENCES orders (id),
    FOREIGN KEY (sku) REFERENCES stock (sku)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE coupons (
    id         VARCHAR(128) NOT NULL PRIMARY KEY,
    user_id    VARCHAR(128) NOT NULL,
    amount_off BIGINT       NOT NULL CHECK (amount_off > 0),
    currency   CHAR(3)      NOT NULL,
    state      VARCHAR(16)  NOT NULL CHECK (state IN ('available', 'frozen', 'used', 'expired')),
    order_id   VARCHAR(128),
    expires_at BIGINT,
    created_at BIGINT       NOT NULL,
    CHECK ((state IN ('frozen', 'used')) = (order_id IS NOT NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE payments (
    id             VARCHAR(128) NOT NULL PRIMARY KEY,
    order_id       VARCHAR(128) NOT NULL,
    attempt        BIGINT       NOT NULL,
    channel        VARCHAR(128) NOT NULL,
    channel_txn_id VARCHAR(255) UNIQUE,
    amount         BIGINT       NOT NULL CHECK (amount >= 0),
    currency       CHAR(3)      NOT NULL,
    state          VARCHAR(16)  NOT NULL CHECK (state IN ('initiated', 'succeeded', 'failed', 'refund_pending', 'refunded')),
    fail_reason    VARCHAR(512) NOT NULL DEFAULT '',
    created_at     BIGINT       NOT NULL,
    succeeded_at   BIGINT,
    refunded_at    BIGINT,
    UNIQUE (order_id, attempt),
    FOREIGN KEY (order_id) REFERENCES orders (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE outbox (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    topic           VARCHAR(128) NOT NULL,
    message_key     VARCHAR(128) NOT NULL,
    payload         MEDIUMTEXT   NOT NULL,
    state           VARCHAR(16)  NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts        BIGINT       NOT NULL DEFAULT 0,
    next_attempt_at BIGINT       NOT NULL,
    last_error      VARCHAR(2000) NOT NULL DEFAULT '',
    created_at      BIGINT       NOT NULL,
    delivered_at    BIGINT,
    INDEX outbox_state_next_attempt_at (state, next_attempt_at, id),
    INDEX outbox_state_delivered_at (state, delivered_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE outbox;
DROP TABLE payments;
DROP TABLE coupons;
DROP TABLE reservations;
DROP TABLE stock;
DROP TABLE order_transitions;
DROP TABLE orders;
