package store

import (
	"context"
	"time"
)

// TelemetryTx holds the queries of tracing and of the metrics that are not counted in
// process (package telemetry). It is part of Tx.
type TelemetryTx interface {
	// OrderTraceInsert records the W3C traceparent of the request that created an order
	// (written only when that request was traced); a second call for the order is ignored.
	OrderTraceInsert(ctx context.Context, orderID, traceParent string) error
	// OrderTraces returns the recorded traceparent of each order of ids that has one.
	OrderTraces(ctx context.Context, ids []string) (map[string]string, error)

	// OutboxBacklog returns the number of pending and of dead messages and the created_at
	// of the oldest pending one (ok=false when none is pending). It reads the partial
	// indexes of pending and dead messages, not the delivered rows.
	OutboxBacklog(ctx context.Context) (pending, dead int64, oldest time.Time, ok bool, err error)
}
