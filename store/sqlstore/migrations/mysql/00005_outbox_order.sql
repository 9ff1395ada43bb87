-- Per-key order and database-unique ids of outbox messages.
--
-- message_id: a UUID minted with the row, the message's id outside this database (the
-- broker's de-duplication id, Nats-Msg-Id); unique across databases, so another deployment
-- or a restored backup publishing to the same stream never collides with these messages.
-- sequence: for an event, its position among the events of its key (the order id): 1, 2, 3…
-- in commit order, taken from outbox_sequences; 0 for messages that are not events.
-- The relay delivers the messages of one key in id order: a message is not claimed while
-- an earlier message of its key is pending (waiting for a retry or claimed by a relay);
-- outbox_key_id serves that check (MySQL has no partial indexes).

-- +goose Up
ALTER TABLE outbox
    ADD COLUMN message_id VARCHAR(36) NOT NULL DEFAULT '',
    ADD COLUMN sequence   BIGINT      NOT NULL DEFAULT 0 CHECK (sequence >= 0),
    ADD INDEX outbox_key_id (message_key, id);
UPDATE outbox SET message_id = UUID() WHERE message_id = '';
ALTER TABLE outbox ALTER COLUMN message_id DROP DEFAULT;

-- The last event sequence of each key. The row is updated (and so locked) by the
-- transaction that writes the key's next event, which orders the key's events in commit order.
CREATE TABLE outbox_sequences (
    message_key   VARCHAR(128) NOT NULL PRIMARY KEY,
    last_sequence BIGINT       NOT NULL CHECK (last_sequence >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE outbox_sequences;
ALTER TABLE outbox DROP INDEX outbox_key_id, DROP COLUMN sequence, DROP COLUMN message_id;
