-- Tracing and merchant webhooks (README.md "Tracing", "Webhooks").
--
-- outbox.trace_parent: the W3C traceparent of the span that wrote the message ("" when the
-- writer was not traced); the relay continues that trace when it delivers the message and
-- passes it on (NATS headers, webhook HTTP headers).
-- order_traces: the traceparent of the request that created an order, written only when that
-- request was traced; background transitions of the order (the close) continue its trace.
-- webhook_subscribers: merchant endpoints; topics is a JSON array of outbox topics ("*" for
-- all). The secret signs deliveries (Orderly-Signature) and so is kept as is, not hashed.

-- +goose Up
ALTER TABLE outbox ADD COLUMN trace_parent TEXT NOT NULL DEFAULT '';

CREATE TABLE order_traces (
    order_id     TEXT PRIMARY KEY,
    trace_parent TEXT NOT NULL CHECK (length(trace_parent) <= 128)
);

CREATE TABLE webhook_subscribers (
    id         TEXT   PRIMARY KEY,
    url        TEXT   NOT NULL CHECK (url LIKE 'http://%' OR url LIKE 'https://%'),
    topics     TEXT   NOT NULL,
    secret     TEXT   NOT NULL CHECK (length(secret) > 0),
    created_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE webhook_subscribers;
DROP TABLE order_traces;
ALTER TABLE outbox DROP COLUMN trace_parent;
