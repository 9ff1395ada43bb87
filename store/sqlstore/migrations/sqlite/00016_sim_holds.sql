-- No-op. This migration created the simulated gateway's tables (sim_holds, sim_hold_keys,
-- sim_gateway_faults) in every database; they moved to the simulated channel's own
-- migrations (channel/sim, version table goose_sim_version), applied only where the channel
-- "sim" is served. A database that ran the old version keeps the tables (unused unless it
-- serves "sim", whose migration then keeps their rows). The version stays so that goose's
-- numbering is unchanged.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
