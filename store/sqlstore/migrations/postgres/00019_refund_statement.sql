-- A statement's refund lines name the provider's refund id (refunds.provider_ref), and its
-- other side is the refunds that succeeded in the statement's period (Reconciler.Statement):
-- both were read through the whole refunds table.

-- +goose Up
CREATE INDEX refunds_provider_ref ON refunds (provider_ref) WHERE provider_ref <> '';
CREATE INDEX refunds_completed_at ON refunds (state, completed_at);

-- +goose Down
DROP INDEX refunds_completed_at;
DROP INDEX refunds_provider_ref;
