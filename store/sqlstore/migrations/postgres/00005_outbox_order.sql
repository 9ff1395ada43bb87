-- Per-key order and database-unique ids of outbox messages.
--
-- message_id: a UUID minted with the row, the message's id outside this database (the
-- broker's de-duplication id, Nats-Msg-Id); unique across databases, so another deployment
-- or a restored backup publishing to the same stream never collides with these messages.
-- sequence: for an event, its position among the events of its key (the order id): 1, 2, 3…
-- in commit order, taken from outbox_sequences; 0 for messages that are not events.
-- The relay delivers the messages of one key in id order: a message is not claimed while
-- an earlier message of its key is pending (waiting for a retry or claimed by a relay);
-- outbox_pending_key_id serves that check.

-- +goose Up
ALTER TABLE outbox ADD COLUMN message_id TEXT;
UPDATE outbox SET message_id = gen_random_uuid()::text;
ALTER TABLE outbox ALTER COLUMN message_id SET NOT NULL;
ALTER TABLE outbox ADD COLUMN sequence BIGINT NOT NULL DEFAULT 0 CHECK (sequence >= 0);
CREATE INDEX outbox_pending_key_id ON outbox (message_key, id) WHERE state = 'pending';

-- The last event sequence of each key. The row is updated (and so locked) by the
-- transaction that writes the key's next event, which orders the key's events in commit order.
CREATE TABLE outbox_sequences (
    message_key   TEXT   PRIMARY KEY,
    last_sequence BIGINT NOT NULL CHECK (last_sequence >= 0)
);

-- +goose Down
DROP TABLE outbox_sequences;
DROP INDEX outbox_pending_key_id;
ALTER TABLE outbox DROP COLUMN sequence;
ALTER TABLE outbox DROP COLUMN message_id;
