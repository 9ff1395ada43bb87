-- Channel notifications (README.md "Payment channels"): every verified notification of a
-- payment provider that orderly acted on, recorded in the same transaction as its effect, so
-- that the provider's retries and duplicates (same channel, same event id) change nothing.
-- kind is the provider-neutral kind of the notification (channel.Kind); payment_id is
-- orderly's payment id the notification named ('' when it named none).

-- +goose Up
CREATE TABLE channel_events (
    channel     VARCHAR(64)  NOT NULL,
    event_id    VARCHAR(255) NOT NULL,
    kind        VARCHAR(32)  NOT NULL CHECK (kind IN ('payment_succeeded', 'payment_failed', 'payment_pending',
                                                      'refund_succeeded', 'refund_failed', 'ignored')),
    payment_id  VARCHAR(128) NOT NULL,
    received_at BIGINT       NOT NULL,
    PRIMARY KEY (channel, event_id),
    INDEX channel_events_payment_id (payment_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE channel_events;
