package telemetry

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
)

// Transport returns an http.RoundTripper for outbound calls (payment providers, merchant
// webhooks) that runs each request in a client span and sends the W3C trace context of ctx
// in its headers (traceparent). base nil means http.DefaultTransport.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return otelhttp.NewTransport(base, otelhttp.WithPropagators(Propagator))
}

// InstrumentGateway wraps a payment gateway so that each call runs in a "gateway <op>"
// client span (attributes orderly.payment_id, orderly.channel where known) and is measured:
// orderly_gateway_call_seconds{op,outcome} and orderly_gateway_errors_total{op}, op one of
// create, query, cancel, refund. A nil m means no metrics.
func InstrumentGateway(g orderly.Gateway, m *Metrics) orderly.Gateway {
	return &instrumentedGateway{next: g, m: m}
}

type instrumentedGateway struct {
	next orderly.Gateway
	m    *Metrics
}

// observe runs one call in its span and records its latency and outcome.
func (g *instrumentedGateway) observe(ctx context.Context, op, paymentID string, call func(ctx context.Context) error) error {
	ctx, span := TracerFrom(ctx).Start(ctx, "gateway "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("orderly.payment_id", paymentID)))
	defer span.End()
	start := time.Now()
	err := call(ctx)
	outcome := "ok"
	if err != nil {
		outcome = "error"
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	if g.m != nil {
		g.m.GatewayLatency.WithLabelValues(op, outcome).Observe(time.Since(start).Seconds())
		if err != nil {
			g.m.GatewayErrors.WithLabelValues(op).Inc()
		}
	}
	return err
}

// ValidateAttempt implements orderly.AttemptValidator when the wrapped gateway does.
func (g *instrumentedGateway) ValidateAttempt(p *orderly.Payment) error {
	if v, ok := g.next.(orderly.AttemptValidator); ok {
		return v.ValidateAttempt(p)
	}
	return nil
}

// Create implements orderly.Gateway.
func (g *instrumentedGateway) Create(ctx context.Context, p *orderly.Payment) (a *orderly.GatewayAttempt, err error) {
	err = g.observe(ctx, "create", p.ID, func(ctx context.Context) error { a, err = g.next.Create(ctx, p); return err })
	return a, err
}

// Query implements orderly.Gateway.
func (g *instrumentedGateway) Query(ctx context.Context, p *orderly.Payment) (gp *orderly.GatewayPayment, err error) {
	err = g.observe(ctx, "query", p.ID, func(ctx context.Context) error { gp, err = g.next.Query(ctx, p); return err })
	return gp, err
}

// Cancel implements orderly.Gateway.
func (g *instrumentedGateway) Cancel(ctx context.Context, p *orderly.Payment) (gp *orderly.GatewayPayment, err error) {
	err = g.observe(ctx, "cancel", p.ID, func(ctx context.Context) error { gp, err = g.next.Cancel(ctx, p); return err })
	return gp, err
}

// Refund implements orderly.Gateway.
func (g *instrumentedGateway) Refund(ctx context.Context, r *orderly.GatewayRefund) (res *orderly.GatewayRefundResult, err error) {
	err = g.observe(ctx, "refund", r.PaymentID, func(ctx context.Context) error { res, err = g.next.Refund(ctx, r); return err })
	return res, err
}

// QueryRefund implements orderly.Gateway.
func (g *instrumentedGateway) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (res *orderly.GatewayRefundResult, err error) {
	err = g.observe(ctx, "refund_query", r.PaymentID, func(ctx context.Context) error { res, err = g.next.QueryRefund(ctx, r); return err })
	return res, err
}
