-- A statement's refund lines name the provider's refund id (refunds.provider_ref), and its
-- other side is the refunds that succeeded in the statement's period (Reconciler.Statement):
-- both were read through the whole refunds table.

-- +goose Up
ALTER TABLE refunds ADD INDEX refunds_provider_ref (provider_ref);
ALTER TABLE refunds ADD INDEX refunds_completed_at (state, completed_at);

-- +goose Down
ALTER TABLE refunds DROP INDEX refunds_completed_at;
ALTER TABLE refunds DROP INDEX refunds_provider_ref;
