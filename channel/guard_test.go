package channel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/telemetry"
)

// flakyAdapter is a channel whose provider fails every call with err (or hangs until the
// call's deadline when hang is set) and counts the calls that reached it.
type flakyAdapter struct {
	err   error
	hang  bool
	calls atomic.Int64
}

func (f *flakyAdapter) answer(ctx context.Context) (*orderly.GatewayPayment, error) {
	f.calls.Add(1)
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, f.err
}
func (f *flakyAdapter) Create(ctx context.Context, _ *orderly.Payment) (*orderly.GatewayAttempt, error) {
	_, err := f.answer(ctx)
	return nil, err
}
func (f *flakyAdapter) Query(ctx context.Context, _ *orderly.Payment) (*orderly.GatewayPayment, error) {
	return f.answer(ctx)
}
func (f *flakyAdapter) Cancel(ctx context.Context, _ *orderly.Payment) (*orderly.GatewayPayment, error) {
	return f.answer(ctx)
}
func (f *flakyAdapter) Refund(ctx context.Context, _ *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	_, err := f.answer(ctx)
	return nil, err
}
func (f *flakyAdapter) QueryRefund(ctx context.Context, _ *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	_, err := f.answer(ctx)
	return nil, err
}

var testPayment = &orderly.Payment{ID: "p"}

func (f *flakyAdapter) Name() string { return "flaky" }
func (f *flakyAdapter) Verify(http.Header, []byte, time.Time) (*channel.Notification, error) {
	return nil, errors.New("not used")
}
func (f *flakyAdapter) Ack(http.ResponseWriter, error) {}

// TestGuardBreaker: 5 transient failures in a row open the channel's breaker: the next calls
// fail at once with orderly.ErrChannelUnavailable without reaching the provider, and the gauge
// says open; after the open period one trial call goes through. Refusals (*orderly.Error)
// never open it.
func TestGuardBreaker(t *testing.T) {
	t.Parallel()
	m := telemetry.NewMetrics()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &flakyAdapter{err: errors.New("connection reset")}
	g := channel.Guard(f, time.Second, channel.BreakerConfig{Open: 200 * time.Millisecond}, m, log)
	ctx := t.Context()
	for i := range channel.DefaultBreakerFailures {
		if _, err := g.Cancel(ctx, testPayment); err == nil || errors.Is(err, orderly.ErrChannelUnavailable) {
			t.Fatalf("call %d: %v, want the provider's error", i+1, err)
		}
	}
	for range 3 {
		if _, err := g.Query(ctx, testPayment); !errors.Is(err, orderly.ErrChannelUnavailable) {
			t.Fatalf("call with the breaker open: %v, want orderly.ErrChannelUnavailable", err)
		}
	}
	if got := f.calls.Load(); got != channel.DefaultBreakerFailures {
		t.Errorf("calls that reached the provider: %d, want %d", got, channel.DefaultBreakerFailures)
	}
	if v := testutil.ToFloat64(m.ChannelBreakerState.WithLabelValues("flaky")); v != 2 {
		t.Errorf("breaker gauge %v, want 2 (open)", v)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.calls.Load() == channel.DefaultBreakerFailures {
		if time.Now().After(deadline) {
			t.Fatal("no trial call after the open period")
		}
		_, _ = g.Query(ctx, testPayment)
		time.Sleep(20 * time.Millisecond)
	}
	if got := f.calls.Load(); got != channel.DefaultBreakerFailures+1 {
		t.Errorf("calls after the open period: %d, want one trial call", got)
	}

	refusing := &flakyAdapter{err: orderly.Errorf(orderly.EINVALID, "refused")}
	g = channel.Guard(refusing, time.Second, channel.BreakerConfig{}, m, log)
	for range 2 * channel.DefaultBreakerFailures {
		if _, err := g.Refund(ctx, &orderly.GatewayRefund{PaymentID: "p"}); orderly.ErrorCode(err) != orderly.EINVALID {
			t.Fatalf("refund: %v, want the refusal", err)
		}
	}
	if got := refusing.calls.Load(); got != 2*channel.DefaultBreakerFailures {
		t.Errorf("refusals: %d calls reached the provider, want all %d (refusals never open the breaker)", got, 2*channel.DefaultBreakerFailures)
	}
}

// TestGuardCallTimeout: a provider that does not answer is cut at the per-call timeout.
func TestGuardCallTimeout(t *testing.T) {
	t.Parallel()
	f := &flakyAdapter{hang: true}
	g := channel.Guard(f, 50*time.Millisecond, channel.BreakerConfig{}, telemetry.NewMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	start := time.Now()
	_, err := g.Cancel(t.Context(), testPayment)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cancel: %v, want a deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Cancel took %s, want about 50ms", d)
	}
}
