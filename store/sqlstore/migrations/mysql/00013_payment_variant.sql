-- Gray release of payment channels (README.md "Payment channels"): payments.variant is the
-- version of the channel the attempt was made on ("v2" of channel "stripe", routed as
-- "stripe@v2"), '' when the channel has a single version. Success rates are reported per
-- channel and variant.

-- +goose Up
ALTER TABLE payments ADD COLUMN variant VARCHAR(64) NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE payments DROP COLUMN variant;
