-- A relay lane that claims the messages of some topics (the webhook lane) reads them through
-- this index: through outbox_state_next_attempt_at it read every other pending message
-- first, the whole backlog of a burst on each claim.

-- +goose Up
ALTER TABLE outbox ADD INDEX outbox_state_topic_next_attempt_at (state, topic, next_attempt_at, id);

-- +goose Down
ALTER TABLE outbox DROP INDEX outbox_state_topic_next_attempt_at;
