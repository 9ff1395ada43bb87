-- Role accounts (kind 'role': the ride platform's fees, a driver's payouts) live in a
-- namespace of their own, "role:<currency>:<name>", out of the buyers' reach: before, they
-- were user wallets, and a buyer who named user_id "ride_platform" spent the platform's
-- fees. wallet_accounts.kind gains 'role'; like a user's, a role account never goes below
-- zero.
--
-- The kind CHECK was declared on its column: MariaDB keeps it with the column (named after
-- it), and MODIFY drops it; MySQL 8 keeps it as a table constraint named
-- wallet_accounts_chk_N, which is looked up by its clause and dropped by name after the new
-- one is added under a fixed name (a no-op DO 0 where none is left), as 00004 does.

-- +goose Up
ALTER TABLE wallet_accounts
    MODIFY kind VARCHAR(16) NOT NULL,
    ADD CONSTRAINT wallet_accounts_kind_check CHECK (kind IN ('user', 'system', 'role'));
SET @drop_wallet_kind_check = COALESCE((
    SELECT CONCAT('ALTER TABLE wallet_accounts DROP CONSTRAINT `', tc.CONSTRAINT_NAME, '`')
    FROM information_schema.TABLE_CONSTRAINTS tc
    JOIN information_schema.CHECK_CONSTRAINTS cc
      ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
    WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = 'wallet_accounts' AND tc.CONSTRAINT_TYPE = 'CHECK'
      AND cc.CHECK_CLAUSE LIKE '%''user''%' AND tc.CONSTRAINT_NAME <> 'wallet_accounts_kind_check'
    LIMIT 1), 'DO 0');
PREPARE drop_wallet_kind_check FROM @drop_wallet_kind_check;
EXECUTE drop_wallet_kind_check;
DEALLOCATE PREPARE drop_wallet_kind_check;

-- +goose Down
UPDATE wallet_accounts SET kind = 'user' WHERE kind = 'role';
ALTER TABLE wallet_accounts
    DROP CONSTRAINT wallet_accounts_kind_check,
    ADD CONSTRAINT wallet_accounts_kind_check CHECK (kind IN ('user', 'system'));
