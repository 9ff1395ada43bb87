package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly/mock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testNow is the fixed clock of every test server: it has sub-millisecond digits, so that
// tests see them truncated.
var testNow = time.Date(2026, 11, 30, 7, 33, 7, 123456789, time.UTC)

// testSecret is the callback secret of every test server.
var testSecret = []byte("test-callback-secret")

// fixture is a server on mock services, with the logs it wrote.
type fixture struct {
	srv      *Server
	h        http.Handler
	orders   *mock.OrderService
	payments *mock.PaymentService
	catalog  *mock.CatalogService
	logs     *syncBuffer
}

// setup returns a server with empty mocks (a call to an unset mock method panics, which
// the server answers 500), testNow as clock and testSecret as callback secret. configure
// functions may change the config before New.
func setup(t testing.TB, configure ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{
		orders:   &mock.OrderService{},
		payments: &mock.PaymentService{},
		catalog:  &mock.CatalogService{},
		logs:     &syncBuffer{},
	}
	cfg := Config{
		Orders:         f.orders,
		Payments:       f.payments,
		Catalog:        f.catalog,
		CallbackSecret: testSecret,
		Now:            func() time.Time { return testNow },
		Logger:         slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, fn := range configure {
		fn(&cfg)
	}
	f.srv = New(cfg)
	f.h = f.srv.Handler()
	t.Cleanup(func() {
		if t.Failed() && f.logs.Len() > 0 {
			t.Logf("server logs:\n%s", f.logs.String())
		}
	})
	return f
}

// do serves req and returns the recorded response.
func (f *fixture) do(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// newRequest returns a request; a non-empty body is sent as application/json.
func newRequest(method, path, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// assertProblem checks that rec is an application/problem+json answer with status and the
// type URI of code, for the request path, and returns the problem.
func assertProblem(t testing.TB, rec *httptest.ResponseRecorder, status int, code string) *Problem {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d; body: %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != ProblemContentType {
		t.Errorf("Content-Type = %q, want %q", ct, ProblemContentType)
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("decode problem %q: %v", rec.Body, err)
	}
	if want := ProblemTypeBase + code; p.Type != want {
		t.Errorf("problem type = %q, want %q (detail %q)", p.Type, want, p.Detail)
	}
	if p.Status != status {
		t.Errorf("problem status = %d, want %d", p.Status, status)
	}
	if p.Title == "" || p.Detail == "" || p.Instance == "" {
		t.Errorf("problem has an empty member: %+v", p)
	}
	return &p
}

// assertJSON checks that rec is a JSON answer with status whose body equals want as JSON.
func assertJSON(t testing.TB, rec *httptest.ResponseRecorder, status int, want string) {
	t.Helper()
	if rec.Code != status {
		t.Errorf("status = %d, want %d; body: %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var got, exp any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode body %q: %v", rec.Body, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatalf("decode want %q: %v", want, err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("body =\n%s\nwant\n%s", rec.Body, want)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (log output).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
