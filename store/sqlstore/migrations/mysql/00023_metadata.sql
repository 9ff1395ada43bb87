-- Metadata: the merchant's own key-value data (orderly.Metadata) on orders (and so trips),
-- payments, refunds and groups, as a JSON object in text; NULL when there is none. orderly
-- never queries by it, so it has no index.

-- +goose Up
ALTER TABLE orders ADD COLUMN metadata TEXT;
ALTER TABLE payments ADD COLUMN metadata TEXT;
ALTER TABLE refunds ADD COLUMN metadata TEXT;
ALTER TABLE deal_groups ADD COLUMN metadata TEXT;

-- +goose Down
ALTER TABLE deal_groups DROP COLUMN metadata;
ALTER TABLE refunds DROP COLUMN metadata;
ALTER TABLE payments DROP COLUMN metadata;
ALTER TABLE orders DROP COLUMN metadata;
