// Package admintest is the HTTP API with its admin routes on a real engine (SQLite), seeded
// with dead letters on demand: the kit of the admin routes' tests and of the admin page's
// browser test (a module of its own, httpapi/browsertest).
package admintest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
)

// Token is the engine's admin token.
const Token = "admin-test-token"

// TopicCounted is the topic of the kit's messages; its handler fails while the engine is
// failing (New: until SetFailing(false)) and counts the deliveries it applied.
const TopicCounted = "test.counted"

// Engine is the HTTP API (H) with its admin routes on a real engine.
type Engine struct {
	*enginetest.Env
	H http.Handler

	mu        sync.Mutex
	failing   bool
	delivered map[int64]int // message id → Apply calls that committed with the delivery
}

// New returns an Engine whose TopicCounted handler fails: its messages die at their one attempt.
func New(t *testing.T) *Engine {
	t.Helper()
	g := &Engine{failing: true, delivered: map[int64]int{}}
	g.Env = enginetest.New(t, enginetest.Options{MaxAttempts: 1, Handlers: map[string]outbox.Handler{TopicCounted: {
		Call: func(context.Context, *orderly.Message) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.failing {
				return errors.New("subscriber down")
			}
			return nil
		},
		Apply: func(_ context.Context, _ store.Tx, msgs []*orderly.Message) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			for _, m := range msgs {
				g.delivered[m.ID]++
			}
			return nil
		},
	}}})
	g.H = httpapi.New(httpapi.Config{Orders: g.Orders, Payments: g.Payments, Catalog: g.Orders,
		CallbackSecret: []byte("admin-test-callback-secret"), AdminToken: Token, Admin: g.Engine.Admin()}).Handler()
	return g
}

// SetFailing makes the TopicCounted handler fail (true) or deliver (false).
func (g *Engine) SetFailing(failing bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = failing
}

// Delivered returns how many deliveries of message id were applied.
func (g *Engine) Delivered(id int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.delivered[id]
}

// Do sends a request with token (none for "") and operator "alice", and returns the
// status and the JSON body.
func (g *Engine) Do(t *testing.T, method, path, token, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set(httpapi.OperatorHeader, "alice")
	rec := httptest.NewRecorder()
	g.H.ServeHTTP(rec, req)
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, rec.Body, err)
	}
	return rec.Code, v
}

// DeadMessage writes a message of TopicCounted under key and lets its one attempt fail: it
// is dead. It returns its id.
func (g *Engine) DeadMessage(t *testing.T, key string) int64 {
	t.Helper()
	ctx := context.Background()
	g.InTx(t, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		m, err := outbox.NewMessage(TopicCounted, key, map[string]string{"key": key}, now)
		if err != nil {
			return err
		}
		return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{m})
	})
	g.Drain(t)
	var dead []*orderly.Message
	g.Read(t, func(tx store.Tx) (err error) {
		dead, err = tx.OutboxDeadList(ctx, &store.OutboxFilter{Limit: 100})
		return err
	})
	for _, m := range dead {
		if m.Key == key {
			return m.ID
		}
	}
	t.Fatalf("message %s is not dead: %v", key, dead)
	return 0
}
