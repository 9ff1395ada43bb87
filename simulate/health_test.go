package simulate

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClientAvoidsUnhealthyTarget: a target whose /readyz stops answering (a SIGSTOPped
// instance) gets no new request once a health check failed, and gets requests again once
// it answers; the other target takes them meanwhile.
func TestClientAvoidsUnhealthyTarget(t *testing.T) {
	t.Parallel()
	var stopped atomic.Bool
	release := make(chan struct{})
	var served atomic.Int64
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if stopped.Load() {
			select { // no answer while stopped
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		if r.URL.Path != "/readyz" {
			served.Add(1)
		}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(hung.Close)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	var n atomic.Int64 // requests the live target served, health checks aside
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/readyz" {
			n.Add(1)
		}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(live.Close)
	cl := testClient(t, 5*time.Second, hung.URL, live.URL)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { cl.watchHealth(ctx) })
	defer func() { cancel(); wg.Wait() }()

	stopped.Store(true)
	pollUntil(t, "the stopped target found unhealthy", func() bool { return cl.targets[0].unhealthy.Load() })
	before := n.Load()
	for i := range 20 {
		if err := cl.do(t.Context(), http.MethodPost, "/x", []byte(`{}`), nil, nil); err != nil {
			t.Fatalf("request %d while one target is stopped: %v", i, err)
		}
	}
	if got := n.Load() - before; got != 20 {
		t.Errorf("the live target served %d of 20 requests while the other was unhealthy", got)
	}
	if served.Load() != 0 {
		t.Errorf("the stopped target got %d requests after it was found unhealthy", served.Load())
	}

	stopped.Store(false)
	releaseOnce.Do(func() { close(release) })
	pollUntil(t, "the resumed target found healthy again", func() bool { return !cl.targets[0].unhealthy.Load() })
	for range 20 {
		if err := cl.do(t.Context(), http.MethodPost, "/x", []byte(`{}`), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if served.Load() != 10 {
		t.Errorf("the resumed target served %d of 20 requests, want 10 (round robin)", served.Load())
	}
}

// pollUntil polls cond every 10 ms until it holds, failing t after 5 s.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
