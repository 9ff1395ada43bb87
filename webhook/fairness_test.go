package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/webhook"
)

const fairAdminToken = "fairness-admin-token"

// fairCluster is a set of engines (instances) on one database, each serving the HTTP API
// with its relay running, a subscriber that hangs until its delivery times out (slow) and
// one that answers at once, recording when each event reached it (healthy).
type fairCluster struct {
	engines []*engine.Engine
	slow    struct {
		calls, inFlight atomic.Int64
		id              string
	}
	mu      sync.Mutex
	arrived map[string]time.Time // "topic key" → when the healthy subscriber got it
}

// dialects are the databases of the fairness tests, with their number of instances.
func fairDialects(t *testing.T) []struct {
	name      string
	url       func(t *testing.T) string
	instances int
} {
	return []struct {
		name      string
		url       func(t *testing.T) string
		instances int
	}{
		{"sqlite", func(t *testing.T) string { return sqlitetest.Path(t) }, 1},
		{"postgres", func(t *testing.T) string { return testdb.Fresh(t, testdb.URL(t, "postgres")) }, 3},
		{"mysql", func(t *testing.T) string { return testdb.Fresh(t, testdb.URL(t, "mysql")) }, 3},
	}
}

// newFairCluster starts instances engines on dbURL, subscribes slow to every event over
// HTTP, gives it dead dead deliveries, then subscribes healthy.
func newFairCluster(t *testing.T, dbURL string, instances, dead int) *fairCluster {
	t.Helper()
	ctx := context.Background()
	c := &fairCluster{arrived: map[string]time.Time{}}
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.slow.calls.Add(1)
		c.slow.inFlight.Add(1)
		defer c.slow.inFlight.Add(-1)
		select { // never answers: each delivery costs the webhook timeout
		case <-release:
		case <-r.Context().Done():
		}
	}))
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env webhook.Envelope
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &env)
		c.mu.Lock()
		if _, ok := c.arrived[env.Topic+" "+env.Key]; !ok {
			c.arrived[env.Topic+" "+env.Key] = time.Now()
		}
		c.mu.Unlock()
	}))
	for i := range instances {
		e, err := engine.Open(ctx, engine.Config{
			Addr: "127.0.0.1:0", DatabaseURL: dbURL, CallbackSecret: []byte("fairness-secret"), AdminToken: fairAdminToken, Gateway: sim.New(),
			InstanceID: fmt.Sprintf("%s-%d", t.Name(), i), SweepInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}, features.All()...)
		if err != nil {
			t.Fatalf("open engine %d: %v", i, err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		c.engines = append(c.engines, e)
	}
	// Cleanups run last first: the slow handlers return, the engines stop, the servers close.
	t.Cleanup(slow.Close)
	t.Cleanup(healthy.Close)
	t.Cleanup(func() {
		for _, e := range c.engines {
			if err := e.Close(ctx); err != nil {
				t.Errorf("close engine: %v", err)
			}
		}
	})
	t.Cleanup(func() { close(release) })

	var sub struct {
		ID string `json:"id"`
	}
	c.do(t, 0, http.MethodPost, "/v1/admin/webhooks", fmt.Sprintf(`{"url":%q,"topics":["*"]}`, slow.URL+"/slow"), &sub)
	c.slow.id = sub.ID
	c.deadDeliveries(t, dead)
	c.do(t, len(c.engines)-1, http.MethodPost, "/v1/admin/webhooks", fmt.Sprintf(`{"url":%q,"topics":["*"]}`, healthy.URL+"/hooks"), &sub)
	c.do(t, 0, http.MethodPut, "/v1/inventory/SKU-1", `{"available":1000000}`, nil)
	return c
}

// do sends a request with the admin token to instance i and decodes a 2xx answer into out.
func (c *fairCluster) do(t testing.TB, i int, method, path, body string, out any) {
	t.Helper()
	req, err := http.NewRequest(method, c.engines[i].URL()+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+fairAdminToken)
	req.Header.Set("Orderly-Operator", "alice")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
}

// deadDeliveries writes n dead webhook deliveries of the slow subscriber (the only one so
// far), as the relay
// leaves them after its attempts: each the fan-out of an order.paid event of its own order,
// made dead in the transaction that writes it (no relay sees them pending).
func (c *fairCluster) deadDeliveries(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	svc, err := webhook.New(webhook.Config{Store: c.engines[0].Store()})
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < n; start += 1000 {
		err := c.engines[0].Store().InTx(ctx, func(tx store.Tx) error {
			var events []*orderly.Message
			for i := start; i < min(n, start+1000); i++ {
				events = append(events, &orderly.Message{MessageID: uuid.NewString(), Topic: orderly.TopicOrderPaid,
					Key: "ord-dead-" + strconv.Itoa(i), Sequence: 1, Payload: json.RawMessage(`{}`)})
			}
			if err := svc.FanOut(ctx, tx, events); err != nil {
				return err
			}
			pending, err := tx.OutboxList(ctx, orderly.MessagePending, 1_000_000)
			if err != nil {
				return err
			}
			for _, m := range pending {
				if m.Topic != orderly.TopicWebhookDeliver {
					continue
				}
				if err := tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: m.ID, LastError: "timeout", Dead: true}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// freshEventLatency creates an order on instance i and cancels it over HTTP, and returns
// how long after the cancel's answer the healthy subscriber got its order.closed (or
// bound, false).
func (c *fairCluster) freshEventLatency(t testing.TB, i int, bound time.Duration) (time.Duration, bool) {
	t.Helper()
	var o struct {
		ID string `json:"id"`
	}
	c.do(t, i, http.MethodPost, "/v1/orders", `{"user_id":"u-1","currency":"USD","payment_timeout_seconds":600,
		"items":[{"sku":"SKU-1","quantity":1,"unit_price":500}]}`, &o)
	c.do(t, i, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", "", nil)
	cancelled := time.Now()
	want := orderly.TopicOrderClosed + " " + o.ID
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		c.mu.Lock()
		at, ok := c.arrived[want]
		c.mu.Unlock()
		if ok {
			return max(0, at.Sub(cancelled)), true
		}
		select {
		case <-deadline.C:
			return bound, false
		case <-tick.C:
		}
	}
}

// redrive re-drives every dead webhook delivery over HTTP and returns how many there were.
func (c *fairCluster) redrive(t testing.TB) int {
	t.Helper()
	var res struct {
		Redriven int `json:"redriven"`
	}
	c.do(t, 0, http.MethodPost, "/v1/admin/outbox/dead/redrive", `{"topic":"`+orderly.TopicWebhookDeliver+`"}`, &res)
	return res.Redriven
}

// TestSlowSubscriberRedriveHoldsBackNoOtherSubscriber: 300 dead deliveries of a subscriber
// that never answers are re-driven; another subscriber still gets a fresh event within
// 1.5 s, on every dialect (3 instances on PostgreSQL and MariaDB). The webhook lane used to
// claim in due order only: the re-driven deliveries, due first, took every slot of every
// instance for a webhook timeout (5 s) each, and the fresh event waited behind all of them
// (nothing within 30 s on SQLite and PostgreSQL).
func TestSlowSubscriberRedriveHoldsBackNoOtherSubscriber(t *testing.T) {
	t.Parallel()
	const dead, bound = 300, 1500 * time.Millisecond
	for _, d := range fairDialects(t) {
		t.Run(d.name, func(t *testing.T) {
			c := newFairCluster(t, d.url(t), d.instances, dead)
			if n := c.redrive(t); n != dead {
				t.Fatalf("re-drove %d deliveries, want %d", n, dead)
			}
			if took, ok := waitFor(5*time.Second, func() bool { return c.slow.inFlight.Load() > 0 }); !ok {
				t.Fatalf("no re-driven delivery reached the slow subscriber within %s", took)
			}
			for i := range c.engines { // a fresh event written by each instance
				took, ok := c.freshEventLatency(t, i, 10*time.Second)
				t.Logf("instance %d: the healthy subscriber got a fresh event %s after the change", i, took)
				if !ok || took > bound {
					t.Errorf("instance %d: fresh event reached the healthy subscriber after %s (arrived: %v), want within %s while the slow one's re-drive runs",
						i, took, ok, bound)
				}
			}
			if c.slow.inFlight.Load() == 0 {
				t.Fatal("the slow subscriber no longer hangs: the test proved nothing")
			}
		})
	}
}

// TestRedriveFairnessFigure measures the figure of issue 28: with ORDERLY_FAIRNESS_DEAD=n
// dead deliveries of a subscriber that never answers re-driven on PostgreSQL (3 instances),
// the latency of another subscriber's fresh events (p50, p99, max of 50, one every 100 ms),
// which must stay under 1 s at p99. Skipped unless ORDERLY_FAIRNESS_DEAD is set (10000).
func TestRedriveFairnessFigure(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ORDERLY_FAIRNESS_DEAD"))
	if n <= 0 {
		t.Skip("set ORDERLY_FAIRNESS_DEAD (e.g. 10000) to measure fresh-event latency during a re-drive")
	}
	c := newFairCluster(t, testdb.Fresh(t, testdb.URL(t, "postgres")), 3, n)
	start := time.Now()
	if got := c.redrive(t); got != n {
		t.Fatalf("re-drove %d deliveries, want %d", got, n)
	}
	t.Logf("re-drive of %d over HTTP took %s", n, time.Since(start))
	var lat []time.Duration
	for i := range 50 {
		took, ok := c.freshEventLatency(t, i%len(c.engines), 30*time.Second)
		if !ok {
			t.Fatalf("fresh event %d not delivered within %s", i, took)
		}
		lat = append(lat, took)
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	t.Logf("%d re-driven, slow subscriber calls so far %d: healthy fresh-event latency p50 %s, p99 %s, max %s",
		n, c.slow.calls.Load(), p(0.5), p(0.99), lat[len(lat)-1])
	if p(0.99) >= time.Second {
		t.Errorf("p99 %s, want under 1 s", p(0.99))
	}
}
