package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/timeout"
)

// TestPaymentTimeoutCap checks that `serve --payment-timeout` has the cap of the per-order
// payment_timeout_seconds (7 days): 2562047h used to be accepted.
func TestPaymentTimeoutCap(t *testing.T) {
	for _, d := range []time.Duration{2562047 * time.Hour, 7*24*time.Hour + time.Second} {
		_, err := OpenServer(context.Background(), ServerConfig{
			Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db"), CallbackSecret: []byte("s"), PaymentTimeout: d,
		})
		if err == nil || !strings.Contains(err.Error(), "--payment-timeout must be at most 168h0m0s") {
			t.Errorf("--payment-timeout %s: error %v, want the 7-day cap", d, err)
		}
	}
	_, err := OpenServer(context.Background(), ServerConfig{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db"), CallbackSecret: []byte("s"), RequestTimeout: -time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "--request-timeout") {
		t.Errorf("negative --request-timeout: %v", err)
	}
}

// TestServeWithoutRedis checks that an instance with --timer redis starts while Redis is
// unreachable and takes orders: the delay queue is optional, the database timer and the
// sweep close orders meanwhile, and /readyz and the metric say it is degraded. serve used
// to refuse to start, so an instance killed during a Redis restart stayed down.
func TestServeWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	srv, err := OpenServer(t.Context(), ServerConfig{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db"), CallbackSecret: []byte("s"),
		Timer: "redis", RedisURL: "redis://" + dead + "/0", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("OpenServer with Redis down: %v", err)
	}
	defer srv.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	base := srv.URL()
	put(t, hc, base+"/v1/inventory/sku-1", `{"available": 10}`)
	body := `{"user_id": "u1", "currency": "EUR", "payment_timeout_seconds": 1, "items": [{"sku": "sku-1", "quantity": 1, "unit_price": 100}]}`
	if err := post(t.Context(), hc, base+"/v1/orders", body, "k1"); err != nil {
		t.Fatalf("create with Redis down: %v", err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != `{"status":"degraded","degraded":["redis"]}`+"\n" {
		t.Errorf("/readyz: %d %q, want 200 degraded by redis", resp.StatusCode, b)
	}
	if v := testutil.ToFloat64(srv.Metrics.DependencyUp.WithLabelValues("redis")); v != 0 {
		t.Errorf("orderly_dependency_up{dependency=redis} = %v, want 0", v)
	}
	// The database timer closes the order without the queue (payment timeout 1 s).
	waitFor(t, 15*time.Second, "the order closed by the database timer", func() bool {
		var n int
		_ = srv.Store.Read(t.Context(), func(tx store.Tx) error {
			due, err := tx.OrdersOpen(t.Context(), &store.OrdersOpenParams{Limit: 10})
			n = len(due)
			return err
		})
		return n == 0
	})
}

// countingQueue is a timeout.DelayQueue that counts Adds.
type countingQueue struct {
	timeout.DelayQueue
	adds int
}

func (q *countingQueue) Add(context.Context, []timeout.DelayItem) error { q.adds++; return nil }

// TestOptionalQueueSkipsWhileDown checks that, while the dependency check says Redis is
// down, an order's Add to the delay queue fails at once without reaching Redis (whose
// client would retry its dial on the create's request path), and reaches it again once
// Redis answers.
func TestOptionalQueueSkipsWhileDown(t *testing.T) {
	inner := &countingQueue{}
	dep := &dependency{}
	q := optionalQueue{DelayQueue: inner, dep: dep}
	items := []timeout.DelayItem{{OrderID: "o1", CloseAt: time.Now()}}
	if err := q.Add(t.Context(), items); !errors.Is(err, errQueueDown) || inner.adds != 0 {
		t.Fatalf("Add while down: %v, %d adds reached Redis; want errQueueDown and none", err, inner.adds)
	}
	dep.up.Store(true)
	if err := q.Add(t.Context(), items); err != nil || inner.adds != 1 {
		t.Fatalf("Add while up: %v, %d adds; want nil and 1", err, inner.adds)
	}
}
