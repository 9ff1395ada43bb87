-- The real edge (README.md "Payment channels"): the provider's object id of each attempt
-- (Stripe PaymentIntent, WeChat Pay prepay_id), which query, cancel and refund name; the
-- payer's id at the provider given at start (a WeChat openid); the handoff the buyer's
-- client needs (JSON of orderly.NextAction, NULL when none). A refund keeps the provider's
-- refund id and its last non-final state while it is requested.

-- +goose Up
ALTER TABLE payments ADD COLUMN provider_ref VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN payer_id VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE payments ADD COLUMN next_action TEXT NULL;
ALTER TABLE refunds ADD COLUMN provider_ref VARCHAR(255) NOT NULL DEFAULT '';
ALTER TABLE refunds ADD COLUMN provider_status VARCHAR(255) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE refunds DROP COLUMN provider_status;
ALTER TABLE refunds DROP COLUMN provider_ref;
ALTER TABLE payments DROP COLUMN next_action;
ALTER TABLE payments DROP COLUMN payer_id;
ALTER TABLE payments DROP COLUMN provider_ref;
