-- A relay lane that claims the messages of some topics (the webhook lane) reads them through
-- this index: through outbox_pending_next_attempt_at it read every other pending message
-- first, the whole backlog of a burst on each claim.

-- +goose Up
CREATE INDEX outbox_pending_topic ON outbox (topic, next_attempt_at, id) WHERE state = 'pending';

-- +goose Down
DROP INDEX outbox_pending_topic;
