package simulate

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Health checks of the targets, as a load balancer makes them: with several targets, each
// one's GET /readyz is asked every healthInterval; a target that does not answer (below 500) within
// healthTimeout (stopped with SIGSTOP, hung, its database gone) is avoided by new requests
// until it answers again. Requests already sent to it wait for their answer as they would
// behind a real load balancer.
const (
	healthInterval = 250 * time.Millisecond
	healthTimeout  = 500 * time.Millisecond
)

// watchHealth checks every target until ctx ends; it returns at once with one target
// (there is nowhere else to send requests). It returns when its checks have stopped.
func (c *client) watchHealth(ctx context.Context) {
	if len(c.targets) < 2 {
		return
	}
	hc := &http.Client{Timeout: healthTimeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	var wg sync.WaitGroup
	for _, t := range c.targets {
		wg.Go(func() {
			tick := time.NewTicker(healthInterval)
			defer tick.Stop()
			for {
				if !c.healthy(ctx, hc, t) && ctx.Err() == nil {
					// Avoided until the next check that succeeds, which lifts it.
					t.downUntil.Store(time.Now().Add(healthInterval + healthTimeout + healthInterval).UnixNano())
					t.unhealthy.Store(true)
				} else if t.unhealthy.Swap(false) {
					t.downUntil.Store(0)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	wg.Wait()
}

// healthy reports whether the target answers GET /readyz within healthTimeout with a status
// below 500 (a server without that route answers 404, and is alive; orderly answers 503
// while its database is unreachable).
func (c *client) healthy(ctx context.Context, hc *http.Client, t *target) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	_ = resp.Body.Close()
	return resp.StatusCode < http.StatusInternalServerError
}
