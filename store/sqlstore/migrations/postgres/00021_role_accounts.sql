-- Role accounts (kind 'role': the ride platform's fees, a driver's payouts) live in a
-- namespace of their own, "role:<currency>:<name>", out of the buyers' reach: before, they
-- were user wallets, and a buyer who named user_id "ride_platform" spent the platform's
-- fees. wallet_accounts.kind gains 'role'; like a user's, a role account never goes below
-- zero. The column's CHECK was declared inline: PostgreSQL named it wallet_accounts_kind_check.

-- +goose Up
ALTER TABLE wallet_accounts DROP CONSTRAINT wallet_accounts_kind_check,
    ADD CONSTRAINT wallet_accounts_kind_check CHECK (kind IN ('user', 'system', 'role'));

-- +goose Down
UPDATE wallet_accounts SET kind = 'user' WHERE kind = 'role';
ALTER TABLE wallet_accounts DROP CONSTRAINT wallet_accounts_kind_check,
    ADD CONSTRAINT wallet_accounts_kind_check CHECK (kind IN ('user', 'system'));
