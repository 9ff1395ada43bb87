-- A message group is the unit of fairness of a relay lane: a lane claims at most a few keys
-- of one group at a time (outbox.Lane.GroupLimit), so that one subscriber's backlog or
-- re-drive never holds back the deliveries of the others. Webhook deliveries are grouped
-- by subscriber; the pending and dead ones written before this column get theirs from
-- their key, "webhook:<subscriber id>:<event key>".

-- +goose Up
ALTER TABLE outbox ADD COLUMN message_group TEXT NOT NULL DEFAULT '';
UPDATE outbox SET message_group = split_part(message_key, ':', 2)
	WHERE topic = 'webhook.deliver' AND state IN ('pending', 'dead') AND message_key LIKE 'webhook:%:%';

-- +goose Down
ALTER TABLE outbox DROP COLUMN message_group;
