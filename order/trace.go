package order

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// orderTracesKey marks a context whose transitions continue each order's own trace.
type orderTracesKey struct{}

// ContinueOrderTraces returns ctx marked so that the transitions applied under it continue
// the trace of the request that created each order (store.Tx.OrderTraces) instead of the
// trace of ctx: a background trigger (the closer) uses it, so that one trace follows an
// order from its creation through its close to the delivery of its events. The span of
// ctx (the close batch) is linked from each order's transition span.
func ContinueOrderTraces(ctx context.Context) context.Context {
	return context.WithValue(ctx, orderTracesKey{}, true)
}

// transitionSpans are the spans of one Machine.Transition: one per changed order when the
// transition continues the orders' own traces, else one for the whole call.
type transitionSpans struct {
	spans []trace.Span
	// parents maps an order id to the traceparent of its transition span, when per order.
	parents map[string]string
}

// startTransitionSpans starts the spans of a transition that changed the orders changed:
// attributes orderly.flow, orderly.from, orderly.to, orderly.event and orderly.order_id
// (orderly.order_count for a batch). Per order when ctx is marked by ContinueOrderTraces
// and its span records (tracing is on); otherwise one span, child of ctx's.
func startTransitionSpans(ctx context.Context, tx store.Tx, flow *orderly.Flow, p *store.OrdersTransitionParams, changed []string) (context.Context, *transitionSpans, error) {
	attrs := []attribute.KeyValue{
		attribute.String("orderly.flow", flow.Name), attribute.String("orderly.from", string(p.From)),
		attribute.String("orderly.to", string(p.To)), attribute.String("orderly.event", string(p.Event)),
	}
	ts := &transitionSpans{}
	batch := trace.SpanFromContext(ctx)
	tracer := telemetry.TracerFrom(ctx) // the batch's provider: an order's remote parent has none
	if continueTraces, _ := ctx.Value(orderTracesKey{}).(bool); !continueTraces || !batch.IsRecording() {
		if len(changed) == 1 {
			attrs = append(attrs, attribute.String("orderly.order_id", changed[0]))
		} else {
			attrs = append(attrs, attribute.Int("orderly.order_count", len(changed)))
		}
		ctx, span := tracer.Start(ctx, "order.transition", trace.WithAttributes(attrs...))
		ts.spans = []trace.Span{span}
		return ctx, ts, nil
	}
	traces, err := tx.OrderTraces(ctx, changed)
	if err != nil {
		return ctx, ts, err
	}
	link := trace.Link{SpanContext: batch.SpanContext()}
	ts.parents = make(map[string]string, len(changed))
	for _, id := range changed {
		parent := ctx
		if sc := telemetry.SpanContextOf(traces[id]); sc.IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		octx, span := tracer.Start(parent, "order.transition", trace.WithLinks(link),
			trace.WithAttributes(append(attrs, attribute.String("orderly.order_id", id))...))
		ts.spans = append(ts.spans, span)
		ts.parents[id] = telemetry.TraceParent(octx)
	}
	return ctx, ts, nil
}

// end ends the spans, recording err on each.
func (ts *transitionSpans) end(err error) {
	for _, s := range ts.spans {
		if err != nil {
			s.RecordError(err)
			s.SetStatus(codes.Error, err.Error())
		}
		s.End()
	}
}

// OrderContext returns the context in which an effect writes what concerns order id: ctx,
// carrying the order's own transition span when the transition continues the orders'
// traces (ContinueOrderTraces), so that the outbox messages it writes carry that trace.
func (b *EffectBatch) OrderContext(ctx context.Context, id string) context.Context {
	if tp := b.traceParents[id]; tp != "" {
		return telemetry.WithTraceParent(ctx, tp)
	}
	return ctx
}

// traceParent returns the traceparent for the messages about order id: its own
// transition span's, or "" for the span of the inserting context.
func (b *EffectBatch) traceParent(id string) string { return b.traceParents[id] }
