package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/store"
)

// TestServeWithoutRedis checks that an instance with the Redis timer starts while Redis is
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
	e, err := Open(t.Context(), Config{
		Addr: "127.0.0.1:0", DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
		Timer: TimerRedis, Logger: slog.New(slog.DiscardHandler),
		RedisURL: "redis://" + dead + "/0?max_retries=-1", // each ping fails after one try, not go-redis's 4
	})
	if err != nil {
		t.Fatalf("Open with Redis down: %v", err)
	}
	defer func() { _ = e.Close(context.Background()) }()
	if err := e.Start(t.Context()); err != nil {
		t.Fatalf("Start with Redis down: %v", err)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, e.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do(http.MethodPut, "/v1/inventory/sku-1", `{"available": 10}`); code != http.StatusOK {
		t.Fatalf("stock with Redis down: %d %s", code, body)
	}
	order := `{"user_id": "u1", "currency": "EUR", "payment_timeout_seconds": 1, "items": [{"sku": "sku-1", "quantity": 1, "unit_price": 100}]}`
	if code, body := do(http.MethodPost, "/v1/orders", order); code != http.StatusCreated {
		t.Fatalf("create with Redis down: %d %s", code, body)
	}
	if code, body := do(http.MethodGet, "/readyz", ""); code != http.StatusOK || body != `{"status":"degraded","degraded":["redis"]}`+"\n" {
		t.Errorf("/readyz: %d %q, want 200 degraded by redis", code, body)
	}
	if v := testutil.ToFloat64(e.Metrics().DependencyUp.WithLabelValues("redis")); v != 0 {
		t.Errorf("orderly_dependency_up{dependency=redis} = %v, want 0", v)
	}
	// The database timer closes the order without the queue (payment timeout 1 s).
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		_ = e.Store().Read(t.Context(), func(tx store.Tx) error {
			due, err := tx.OrdersOpen(t.Context(), &store.OrdersOpenParams{Limit: 10})
			n = len(due)
			return err
		})
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the order was not closed by the database timer within 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countingQueue is a closer.DelayQueue that counts Adds.
type countingQueue struct {
	closer.DelayQueue
	adds int
}

func (q *countingQueue) Add(context.Context, []closer.DelayItem) error { q.adds++; return nil }

// TestOptionalQueueSkipsWhileDown checks that, while the dependency check says Redis is
// down, an order's Add to the delay queue fails at once without reaching Redis (whose
// client would retry its dial on the create's request path), and reaches it again once
// Redis answers.
func TestOptionalQueueSkipsWhileDown(t *testing.T) {
	inner := &countingQueue{}
	dep := &dependency{}
	q := optionalQueue{DelayQueue: inner, dep: dep}
	items := []closer.DelayItem{{OrderID: "o1", CloseAt: time.Now()}}
	if err := q.Add(t.Context(), items); !errors.Is(err, errQueueDown) || inner.adds != 0 {
		t.Fatalf("Add while down: %v, %d adds reached Redis; want errQueueDown and none", err, inner.adds)
	}
	dep.up.Store(true)
	if err := q.Add(t.Context(), items); err != nil || inner.adds != 1 {
		t.Fatalf("Add while up: %v, %d adds; want nil and 1", err, inner.adds)
	}
}

// TestEngineImportsNoFeature checks that package engine imports no feature package and not
// the simulator: the features are given to Open (package features), and the simulated
// channel as Config.Gateway, never named by it.
func TestEngineImportsNoFeature(t *testing.T) {
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasSuffix(pkg, "/groupbuy") || strings.HasSuffix(pkg, "/ride") || strings.HasSuffix(pkg, "/checkout") ||
			strings.HasSuffix(pkg, "/features") || strings.HasSuffix(pkg, "/channel/sim") {
			t.Errorf("engine depends on the feature or simulator package %s", pkg)
		}
	}
}
