package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderlyhq/orderly/closer"
)

// Checks of an optional dependency (the Redis delay queue of --timer redis): how often it
// is pinged and how long a ping may take.
const (
	dependencyCheckEvery   = 2 * time.Second
	dependencyCheckTimeout = time.Second
)

// dependency watches an optional dependency: an instance serves whether it answers or not
// (the database is the source of truth; without the delay queue the database timer and the
// sweep close orders), and says which it is in its log (on every change), in the metric
// orderly_dependency_up and in GET /readyz ("degraded").
type dependency struct {
	name   string
	ping   func(ctx context.Context) error
	up     atomic.Bool
	gauge  prometheus.Gauge
	logger *slog.Logger
	// effect says in the log what the instance does while the dependency is down.
	effect string
}

// check pings the dependency once and records the outcome, logging a change (and the
// first outcome when it is down).
func (d *dependency) check(ctx context.Context, first bool) {
	pctx, cancel := context.WithTimeout(ctx, dependencyCheckTimeout)
	err := d.ping(pctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return // stopping: the outcome says nothing of the dependency
	}
	was := d.up.Swap(err == nil)
	switch {
	case err != nil && (was || first):
		d.gauge.Set(0)
		d.logger.Warn(d.name+" is unreachable; serving without it: "+d.effect, "error", err)
	case err == nil && (!was || first):
		d.gauge.Set(1)
		if !first {
			d.logger.Info(d.name + " answers again")
		}
	}
}

// watch checks the dependency every dependencyCheckEvery until ctx ends, then closes done.
func (d *dependency) watch(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(dependencyCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			d.check(ctx, false)
		}
	}
}

// errQueueDown is optionalQueue's error while its dependency check says Redis is down.
var errQueueDown = errors.New("the redis delay queue is down (skipped until it answers)")

// optionalQueue is the delay queue of an instance: while the dependency check says Redis
// is down, Add fails at once instead of dialing Redis on the request path of every order
// created (the client's dial retries cost each create about half a second): the database
// timer closes those orders meanwhile, and the deep check puts them back in the queue.
type optionalQueue struct {
	closer.DelayQueue
	dep *dependency
}

func (q optionalQueue) Add(ctx context.Context, items []closer.DelayItem) error {
	if !q.dep.up.Load() {
		return errQueueDown
	}
	return q.DelayQueue.Add(ctx, items)
}
