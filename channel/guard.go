package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/telemetry"
)

// Defaults of Guard: the calls to a channel's provider.
const (
	// DefaultCallTimeout bounds one call to a provider (create, query, cancel, refund).
	DefaultCallTimeout = 10 * time.Second
	// DefaultBreakerFailures is how many consecutive failed calls open a channel's breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpen is how long an open breaker refuses calls before it lets one
	// through (half-open).
	DefaultBreakerOpen = 30 * time.Second
)

// BreakerConfig configures the circuit breaker of every channel. Zero values mean the
// Default* constants.
type BreakerConfig struct {
	Failures uint32        // consecutive transient failures that open it; 5
	Open     time.Duration // how long it stays open before a trial call; 30 s
}

// guardedGateway calls one channel's provider with a timeout per call and through the
// channel's circuit breaker. Refusals by the provider (*orderly.Error) count as answers,
// not failures: only transient errors (network, timeouts, 5xx) open the breaker.
type guardedGateway struct {
	name    string
	gw      orderly.Gateway
	timeout time.Duration
	cb      *gobreaker.CircuitBreaker[*orderly.GatewayPayment]
}

// Guard returns a as an orderly.Gateway whose calls to the provider are each bounded by
// timeout (DefaultCallTimeout when 0) and go through a circuit breaker (bc): after
// bc.Failures transient failures in a row, calls fail at once, for bc.Open, with an error
// matching orderly.ErrChannelUnavailable, then one trial call goes through. The breaker's
// state is m.ChannelBreakerState{channel=a.Name()} and its changes are logged on log.
func Guard(a Adapter, timeout time.Duration, bc BreakerConfig, m *telemetry.Metrics, log *slog.Logger) orderly.Gateway {
	failures := bc.Failures
	if failures == 0 {
		failures = DefaultBreakerFailures
	}
	if bc.Open <= 0 {
		bc.Open = DefaultBreakerOpen
	}
	if timeout <= 0 {
		timeout = DefaultCallTimeout
	}
	gauge := m.ChannelBreakerState.WithLabelValues(a.Name())
	gauge.Set(0)
	return &guardedGateway{name: a.Name(), gw: a, timeout: timeout,
		cb: gobreaker.NewCircuitBreaker[*orderly.GatewayPayment](gobreaker.Settings{
			Name:        a.Name(),
			Timeout:     bc.Open,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
			IsSuccessful: func(err error) bool {
				var refused *orderly.Error
				return err == nil || errors.As(err, &refused)
			},
			// The caller going away says nothing of the provider.
			IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
			OnStateChange: func(name string, from, to gobreaker.State) {
				gauge.Set(float64(to))
				log.Warn("payment channel circuit breaker changed state", "channel", name, "from", from.String(), "to", to.String())
			},
		}),
	}
}

// call runs fn with the per-call timeout through the breaker.
func (g *guardedGateway) call(ctx context.Context, op, paymentID string, fn func(ctx context.Context) (*orderly.GatewayPayment, error)) (*orderly.GatewayPayment, error) {
	gp, err := g.cb.Execute(func() (*orderly.GatewayPayment, error) {
		cctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		return fn(cctx)
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, fmt.Errorf("payment %s: %w", paymentID, &orderly.ChannelUnavailableError{Channel: g.name, Op: op, Cause: err})
	}
	return gp, err
}

// ValidateAttempt implements orderly.AttemptValidator for a provider that does: no call is
// made, so neither the timeout nor the breaker applies.
func (g *guardedGateway) ValidateAttempt(p *orderly.Payment) error {
	if v, ok := g.gw.(orderly.AttemptValidator); ok {
		return v.ValidateAttempt(p)
	}
	return nil
}

// Create implements orderly.Gateway.
func (g *guardedGateway) Create(ctx context.Context, p *orderly.Payment) (a *orderly.GatewayAttempt, err error) {
	_, err = g.call(ctx, "create", p.ID, func(ctx context.Context) (*orderly.GatewayPayment, error) {
		a, err = g.gw.Create(ctx, p)
		return nil, err
	})
	return a, err
}

// Query implements orderly.Gateway.
func (g *guardedGateway) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	return g.call(ctx, "query", p.ID, func(ctx context.Context) (*orderly.GatewayPayment, error) {
		return g.gw.Query(ctx, p)
	})
}

// Cancel implements orderly.Gateway.
func (g *guardedGateway) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	return g.call(ctx, "cancel", p.ID, func(ctx context.Context) (*orderly.GatewayPayment, error) {
		return g.gw.Cancel(ctx, p)
	})
}

// Refund implements orderly.Gateway.
func (g *guardedGateway) Refund(ctx context.Context, r *orderly.GatewayRefund) (res *orderly.GatewayRefundResult, err error) {
	_, err = g.call(ctx, "refund", r.PaymentID, func(ctx context.Context) (*orderly.GatewayPayment, error) {
		res, err = g.gw.Refund(ctx, r)
		return nil, err
	})
	return res, err
}

// QueryRefund implements orderly.Gateway.
func (g *guardedGateway) QueryRefund(ctx context.Context, r *orderly.GatewayRefund) (res *orderly.GatewayRefundResult, err error) {
	_, err = g.call(ctx, "refund_query", r.PaymentID, func(ctx context.Context) (*orderly.GatewayPayment, error) {
		res, err = g.gw.QueryRefund(ctx, r)
		return nil, err
	})
	return res, err
}
