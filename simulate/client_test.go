package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testenv"
)

// countingServer answers every request 200 {} and counts them.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// deadURL returns the URL of a server that is gone: connections to it are refused.
func deadURL(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

// cut answers no request: it reads the request, lets do run (the work a server did before
// it died), then closes the connection without a word.
func cut(w http.ResponseWriter, r *http.Request, do func()) {
	_, _ = io.Copy(io.Discard, r.Body)
	if do != nil {
		do()
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err) // httptest servers speak HTTP/1.1: Hijack works
	}
	_ = conn.Close()
}

func testClient(t *testing.T, retryFor time.Duration, bases ...string) *client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return newClient(bases, &http.Client{Transport: tr, Timeout: 5 * time.Second}, 4, testSecret, retryFor)
}

func TestClientRoundRobin(t *testing.T) {
	t.Parallel()
	a, na := countingServer(t)
	b, nb := countingServer(t)
	c, nc := countingServer(t)
	cl := testClient(t, time.Second, a.URL, b.URL, c.URL)
	for range 30 {
		if err := cl.do(t.Context(), http.MethodGet, "/x", nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if na.Load() != 10 || nb.Load() != 10 || nc.Load() != 10 {
		t.Errorf("requests per target %d, %d, %d; want 10 each", na.Load(), nb.Load(), nc.Load())
	}
	if cl.retries.Load() != 0 {
		t.Errorf("%d retries with every target up", cl.retries.Load())
	}
}

func TestClientRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// dead is a handler that answers nothing; nil: the target refuses connections.
		dead          http.HandlerFunc
		method        string
		wantAmbiguous bool
	}{
		{name: "connection refused", method: http.MethodPost},
		{name: "died mid-request", method: http.MethodPost, wantAmbiguous: true,
			dead: func(w http.ResponseWriter, r *http.Request) { cut(w, r, nil) }},
		{name: "died mid-request, GET", method: http.MethodGet, wantAmbiguous: true,
			dead: func(w http.ResponseWriter, r *http.Request) { cut(w, r, nil) }},
		{name: "503 unavailable (its database restarted)", method: http.MethodPost, wantAmbiguous: true,
			dead: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				writeProblem(w, http.StatusServiceUnavailable, orderly.EUNAVAILABLE, "the database connection was lost")
			}},
		{name: "answer cut short", method: http.MethodPost, wantAmbiguous: true,
			dead: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, `{"id":`)
				w.(http.Flusher).Flush()
				conn, _, _ := http.NewResponseController(w).Hijack()
				_ = conn.Close()
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dead := deadURL(t)
			if tt.dead != nil {
				srv := httptest.NewServer(tt.dead)
				t.Cleanup(srv.Close)
				dead = srv.URL
			}
			live, n := countingServer(t)
			cl := testClient(t, 5*time.Second, dead, live.URL)
			for i := range 6 {
				ambiguous, err := cl.send(t.Context(), tt.method, "/x", []byte(`{}`), nil, nil)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				// Requests that start at the live target never meet the dead one; the
				// others do, unless the dead one is being avoided after a failure.
				if ambiguous && !tt.wantAmbiguous {
					t.Errorf("request %d: ambiguous after %s", i, tt.name)
				}
			}
			if n.Load() != 6 {
				t.Errorf("the live target answered %d requests, want 6", n.Load())
			}
			if cl.retries.Load() == 0 {
				t.Error("no retry counted")
			}
			if tt.wantAmbiguous {
				// The first request went to the dead target (round robin starts there).
				cl2 := testClient(t, 5*time.Second, dead, live.URL)
				if ambiguous, err := cl2.send(t.Context(), tt.method, "/x", []byte(`{}`), nil, nil); err != nil || !ambiguous {
					t.Errorf("first request: ambiguous %v, error %v; want ambiguous", ambiguous, err)
				}
			}
		})
	}
}

func TestClientGivesUp(t *testing.T) {
	t.Parallel()
	dead := deadURL(t)
	// One target, no retry: the transport error at once.
	err := testClient(t, 0, dead).do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	var he *httpError
	if !errors.As(err, &he) || he.Status != 0 || he.Tries != 1 {
		t.Fatalf("error %v, want a transport error after 1 try", err)
	}
	// Every target dead: retries for RetryFor, then the last error.
	start := time.Now()
	cl := testClient(t, 300*time.Millisecond, dead, deadURL(t))
	err = cl.do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if !errors.As(err, &he) || he.Tries < 3 || !strings.Contains(err.Error(), "; before: http://") ||
		!strings.Contains(err.Error(), ": dial: connect: connection refused (at +0s, taking ") {
		t.Fatalf("error %v, want one after several tries", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("gave up after %s, want about RetryFor (300 ms)", d)
	}
	// An answer with any status is not retried.
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusInternalServerError, orderly.EINTERNAL, "boom")
	}))
	t.Cleanup(live.Close)
	cl = testClient(t, time.Second, live.URL, live.URL)
	err = cl.do(t.Context(), http.MethodGet, "/x", nil, nil, nil)
	if !errors.As(err, &he) || he.Status != http.StatusInternalServerError || cl.retries.Load() != 0 {
		t.Fatalf("error %v after %d retries, want the 500 at once", err, cl.retries.Load())
	}
	// A cancelled context ends the retries.
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	err = testClient(t, time.Minute, dead, dead).do(ctx, http.MethodGet, "/x", nil, nil, nil)
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("error %v after %s, want one soon after the cancel", err, time.Since(start))
	}
}

// dyingFront serves f on a second address that misbehaves like an instance that dies: it
// handles every other POST that changes something and then cuts the connection without an
// answer (the work is done, the answer lost), and once it cut each kind of POST twice (a
// cancel once: they are few), it stops for good (connections refused).
type dyingFront struct {
	srv *httptest.Server
	f   *fakeServer

	mu   sync.Mutex
	n    map[string]int // POSTs seen, by route
	cuts map[string]int // POSTs handled and then cut, by route
	dead bool
}

func newDyingFront(t *testing.T, f *fakeServer) *dyingFront {
	d := &dyingFront{f: f, n: map[string]int{}, cuts: map[string]int{}}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

// route names a request by its path shape.
func route(r *http.Request) string {
	switch p := r.URL.Path; {
	case p == "/v1/orders":
		return "create"
	case strings.HasSuffix(p, "/payments"):
		return "start"
	case strings.HasSuffix(p, "/cancel"):
		return "cancel"
	case p == "/v1/payments/callback":
		return "callback"
	}
	return "other"
}

func (d *dyingFront) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	rt := route(r)
	cutIt := false
	if r.Method == http.MethodPost && rt != "other" {
		d.n[rt]++
		cutIt = d.n[rt]%2 == 1 // the first, third, … of each kind
	}
	if cutIt {
		d.cuts[rt]++
	}
	die := !d.dead && d.cuts["create"] >= 2 && d.cuts["start"] >= 2 && d.cuts["cancel"] >= 1 && d.cuts["callback"] >= 2
	d.dead = d.dead || die
	d.mu.Unlock()
	if die {
		go d.srv.Close() // waits for this handler: not here
	}
	if !cutIt {
		d.f.mux.ServeHTTP(w, r)
		return
	}
	cut(w, r, func() { d.f.mux.ServeHTTP(httptest.NewRecorder(), r) })
}

// TestRunSurvivesDyingTarget runs against two targets of one fake server, one of which
// cuts connections after doing the work and then dies: every request must reach the other,
// no create may make two orders, and a payment start sent twice may leave an attempt the
// buyer never learnt of without it being a violation.
func TestRunSurvivesDyingTarget(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f, good := newFakeServer(t, testSecret, fakeOptions{grace: 100 * time.Millisecond})
	front := newDyingFront(t, f)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg, err := Config{
		Targets: []string{front.srv.URL, good.URL}, CallbackSecret: testSecret, Orders: 120, Rate: 200,
		PaymentTimeout: time.Second, Seed: 11, Drain: 3 * time.Second,
	}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(cfg) // Run, keeping the runner to look at its orders
	defer r.close()
	r.c.pause = 0 // keep sending to the front until it dies
	res, err := r.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() {
		t.Fatalf("violations against a correct server behind a dying target:\n%s", res.Summary())
	}
	t.Logf("\n%s", res.Summary())
	front.mu.Lock()
	cuts, dead := front.cuts, front.dead
	front.mu.Unlock()
	t.Logf("cut after the work: %v", cuts)
	if !dead || cuts["create"] == 0 || cuts["start"] == 0 || cuts["cancel"] == 0 || cuts["callback"] == 0 {
		t.Fatalf("the front did not cut every kind of request and die: cuts %v, dead %v", cuts, dead)
	}
	// The transport itself may replay a cut create (it has an Idempotency-Key) on the same
	// target, so not every cut is a retry of the client.
	if res.Targets != 2 || res.Retries == 0 || res.Cancelled == 0 {
		t.Errorf("targets %d, retries %d, cancelled %d; want 2 and some", res.Targets, res.Retries, res.Cancelled)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.orders) != res.Orders {
		t.Errorf("the server has %d orders, the run created %d: a create sent again made a second order", len(f.orders), res.Orders)
	}
	extra, unknownStarts := 0, 0
	for _, tr := range r.driver(orderly.FlowStandard).(*standardFlow).tracked {
		if tr == nil {
			continue
		}
		unknownStarts += tr.unknownStarts
		if n := len(f.byOrder[tr.order.ID]); n > len(tr.payments) {
			extra += n - len(tr.payments)
		}
	}
	// Each cut start added an attempt; so may a start the dying front handled as it closed.
	if extra < cuts["start"] || extra > unknownStarts {
		t.Errorf("%d attempts unknown to their buyers for %d cut starts and %d starts sent again; want between", extra, cuts["start"], unknownStarts)
	}
}

func TestClientConflict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		conflicts int    // answers 409 before a 200
		code      string // of the 409
		wantTries int
		wantErr   bool
	}{
		{name: "conflict then success", conflicts: 2, code: orderly.ECONFLICT, wantTries: 3},
		{name: "conflict every time", conflicts: 100, code: orderly.ECONFLICT, wantTries: 1 + maxConflictRetries, wantErr: true},
		// Two payment starts of one order overlapped (a retry after a lost answer raced the
		// first try): nothing was done, start again (found by a 3-instance run with kills).
		{name: "payment started concurrently then success", conflicts: 1, code: orderly.EPAYMENTRACE, wantTries: 2},
		{name: "another 409 is an answer", conflicts: 100, code: orderly.EOUTOFSTOCK, wantTries: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if n.Add(1) <= int64(tt.conflicts) {
					writeProblem(w, http.StatusConflict, tt.code, "changed concurrently")
					return
				}
				_, _ = io.WriteString(w, "{}")
			}))
			t.Cleanup(srv.Close)
			cl := testClient(t, 0, srv.URL)
			ambiguous, err := cl.send(t.Context(), http.MethodPost, "/x", []byte(`{}`), nil, nil)
			if (err != nil) != tt.wantErr || ambiguous || int(n.Load()) != tt.wantTries {
				t.Errorf("error %v, ambiguous %v after %d tries; want error %v after %d", err, ambiguous, n.Load(), tt.wantErr, tt.wantTries)
			}
		})
	}
}

// TestClientAPIKey: with Config.APIKey every request carries it as a bearer token; without
// one, no Authorization header.
func TestClientAPIKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	plain := testClient(t, 0, srv.URL)
	keyed := testClient(t, 0, srv.URL)
	keyed.apiKey = "ok_abc_def"
	for _, c := range []*client{plain, keyed} {
		if err := c.do(t.Context(), http.MethodPost, "/v1/orders", map[string]any{}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != "" || got[1] != "Bearer ok_abc_def" {
		t.Errorf("Authorization headers %q, want none then Bearer ok_abc_def", got)
	}
}

// TestOrderEventAppliedBeforeDeath: an instance applies a ship and dies before answering;
// the request sent again is refused 409 illegal-transition by the next instance. The
// client reads the order: shipped, so the event took effect and is answered as applied;
// an order not in the event's state keeps the refusal.
func TestOrderEventAppliedBeforeDeath(t *testing.T) {
	t.Parallel()
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			t.Parallel()
			var state atomic.Value
			state.Store(string(orderly.StatePaid))
			dying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if applied {
					state.Store(string(orderly.StateShipped))
				}
				cut(w, r, nil)
			}))
			t.Cleanup(dying.Close)
			live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Method == http.MethodGet {
					w.Header().Set("Content-Type", "application/json")
					_, _ = fmt.Fprintf(w, `{"id":"o1","state":%q}`, state.Load())
					return
				}
				writeProblem(w, http.StatusConflict, orderly.EILLEGAL, "no transition from "+state.Load().(string)+" on ship")
			}))
			t.Cleanup(live.Close)
			cl := testClient(t, 5*time.Second, dying.URL, live.URL)
			o, err := cl.orderEvent(t.Context(), "o1", orderly.EventShip, orderly.StateShipped)
			if applied && (err != nil || o.State != orderly.StateShipped) {
				t.Fatalf("ship applied by the dead instance: %+v, %v; want shipped, no error", o, err)
			}
			var he *httpError
			if !applied && (!errors.As(err, &he) || he.code() != orderly.EILLEGAL) {
				t.Fatalf("ship refused: %v; want the 409 illegal-transition", err)
			}
		})
	}
}

// driver returns the run's driver of the named flow, nil if the run has none.
func (r *runner) driver(name string) FlowDriver {
	if i := slices.Index(r.names, name); i >= 0 {
		return r.drivers[i]
	}
	return nil
}
