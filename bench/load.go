package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// Pace calls fn(ctx, i) for i in [0, n), starting call i at start + i/rate (rate ≤ 0: as
// fast as workers goroutines allow), on at most workers goroutines at once. It is bounded
// in count (n) and time: it stops starting calls when ctx ends or maxDuration passed, and
// returns once the calls it started have returned, with the number started and the
// seconds from the first start to the last start. When every worker is busy the schedule
// slips (an open-loop generator that cannot keep up says so in its achieved rate).
func Pace(ctx context.Context, n int, rate float64, workers int, maxDuration time.Duration, fn func(ctx context.Context, i int)) (started int, sendSeconds float64) {
	ctx, cancel := context.WithTimeout(ctx, maxDuration)
	defer cancel()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range jobs {
				fn(ctx, i)
			}
		})
	}
	start := time.Now()
	var last time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range n {
		if rate > 0 {
			at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					break loop
				case <-timer.C:
				}
			}
		}
		select {
		case <-ctx.Done():
			break loop
		case jobs <- i:
			started++
			last = time.Now()
		}
	}
	close(jobs)
	wg.Wait()
	if started > 0 {
		sendSeconds = last.Sub(start).Seconds()
	}
	return started, sendSeconds
}

// client speaks orderly's HTTP API (docs/api.md) to servers on 127.0.0.0/8 only.
type client struct {
	bases  []string
	next   atomic.Uint32
	hc     *http.Client
	secret []byte
}

// newClient returns a client of the servers at bases; every base must be a loopback
// address: the bench never sends load anywhere else.
func newClient(bases []string, conns int, secret string) (*client, error) {
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			return nil, err
		}
		ip := net.ParseIP(u.Hostname())
		if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
			return nil, fmt.Errorf("bench: %s is not in 127.0.0.0/8: the bench only loads local servers", b)
		}
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		IdleConnTimeout: time.Minute}
	return &client{bases: bases, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, secret: []byte(secret)}, nil
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// apiError is an answer other than the expected status.
type apiError struct {
	Status int
	Type   string // the problem's type, when the body was one
	Body   string
}

func (e *apiError) Error() string { return fmt.Sprintf("HTTP %d %s %s", e.Status, e.Type, e.Body) }

// code returns the last segment of a problem type ("out-of-stock").
func (e *apiError) code() string { return e.Type[strings.LastIndex(e.Type, "/")+1:] }

// do sends a request with a JSON body to the next server (round robin) and decodes a
// 2xx answer into out.
func (c *client) do(ctx context.Context, method, path string, body any, header http.Header, out any) error {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return err
		}
	}
	base := c.bases[int(c.next.Add(1)-1)%len(c.bases)]
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode, Body: string(b[:min(len(b), 300)])}
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(b, &p) == nil {
			e.Type = p.Type
		}
		return e
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

type item struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

type orderRequest struct {
	UserID                string `json:"user_id"`
	Items                 []item `json:"items"`
	Currency              string `json:"currency"`
	PaymentTimeoutSeconds int64  `json:"payment_timeout_seconds,omitempty"`
}

type orderAnswer struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func (c *client) setStock(ctx context.Context, sku string, available int64) error {
	return c.do(ctx, http.MethodPut, "/v1/inventory/"+url.PathEscape(sku), map[string]int64{"available": available}, nil, nil)
}

// createOrder creates an order of one unit of sku.
func (c *client) createOrder(ctx context.Context, user, sku string, timeoutSeconds int64) (*orderAnswer, error) {
	var o orderAnswer
	err := c.do(ctx, http.MethodPost, "/v1/orders", &orderRequest{UserID: user, Currency: "USD",
		Items: []item{{SKU: sku, Quantity: 1, UnitPrice: unitPrice}}, PaymentTimeoutSeconds: timeoutSeconds}, nil, &o)
	return &o, err
}

// pay starts a payment of the order and posts the gateway's signed success callback.
func (c *client) pay(ctx context.Context, o *orderAnswer, n int) error {
	var p struct {
		ID     string `json:"payment_id"`
		Amount int64  `json:"amount"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(o.ID)+"/payments", nil, nil, &p); err != nil {
		return err
	}
	body, err := json.Marshal(map[string]any{"payment_id": p.ID, "order_id": o.ID, "channel_txn_id": fmt.Sprintf("bench-txn-%d-%s", n, p.ID),
		"amount": p.Amount, "currency": o.Currency, "status": orderly.CallbackSucceeded,
		"occurred_at": time.Now().UTC().Format("2006-01-02T15:04:05.000Z")})
	if err != nil {
		return err
	}
	sig := payment.Sign(c.secret, time.Now(), body)
	if err := c.do(ctx, http.MethodPost, "/v1/payments/callback", body, http.Header{payment.SignatureHeader: {sig}}, nil); err != nil {
		return fmt.Errorf("callback: %w", err)
	}
	return nil
}

// latencies collects request latencies safely from many goroutines.
type latencies struct {
	mu sync.Mutex
	ms []float64
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ms = append(l.ms, float64(d.Microseconds())/1000)
	l.mu.Unlock()
}

func (l *latencies) p99() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.Clone(l.ms)
	slices.Sort(s)
	return round1(Percentile(s, 99))
}

// errorLog keeps the first few distinct request errors of a run and counts them all. A
// request that timed out or was shed (503) says the server could not take the rate: it is
// counted apart (overloaded), as a figure of the run, not an error of the bench.
type errorLog struct {
	mu         sync.Mutex
	n          int
	overloaded int
	first      []string
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ae *apiError
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
		e.overloaded++
		return
	}
	e.n++
	if len(e.first) < 5 && !slices.Contains(e.first, err.Error()) {
		e.first = append(e.first, err.Error())
	}
}

// err returns the failures that are not overload, if any.
func (e *errorLog) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		return nil
	}
	return fmt.Errorf("%d requests failed, e.g.: %s", e.n, strings.Join(e.first, "; "))
}

// overload returns the number of requests that timed out or were shed.
func (e *errorLog) overload() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return int64(e.overloaded)
}
