package simulate

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

// maxResponseBytes bounds what the client reads of one response.
const maxResponseBytes = 1 << 20

// client speaks the HTTP contract of docs/api.md to one or more servers that share one
// database. Requests are spread round robin over the targets; a request that gets no
// answer (connection refused or reset, the server died mid-request) is sent again to the
// next target, for up to retryFor. A number of slots caps the requests in flight; a request
// keeps its slot through its retries, and a freed slot goes to a buyer's request before a
// new order's create (slots.go).
type client struct {
	targets  []*target
	next     atomic.Uint32 // round-robin cursor
	hc       *http.Client
	slots    *slots // caps the requests in flight, follow-ups first
	secret   []byte
	retryFor time.Duration // ≤ 0: never send a request again
	pause    time.Duration // a target that did not answer is avoided this long; targetPause
	// provider, when set, turns callbacks into the provider's webhooks (Config.Provider).
	provider Provider
	// retries counts tries sent again after a try that got no answer.
	retries atomic.Int64
	// apiKey is the bearer token of every request (Config.APIKey); "" for none.
	apiKey string

	waitMu sync.Mutex
	waits  []float64 // how long each request waited for a slot, in ms
}

// target is one server.
type target struct {
	base string
	// downUntil is when (unix ns) a target that did not answer may be picked first again;
	// until then requests go to the others when one of them is not avoided too.
	downUntil atomic.Int64
	// unhealthy marks a target whose last health check failed (health.go).
	unhealthy atomic.Bool
}

// Pacing of retries.
const (
	targetPause     = 500 * time.Millisecond // a target that did not answer is avoided this long
	retryBackoffMin = 50 * time.Millisecond  // pause after every target failed once, doubling …
	retryBackoffMax = time.Second            // … up to this
	// A 409 conflict ("the row changed concurrently; retry") is sent again this many times,
	// after conflictPause, doubling.
	maxConflictRetries = 3
	conflictPause      = 20 * time.Millisecond
)

func newClient(bases []string, hc *http.Client, concurrency int, secret []byte, retryFor time.Duration) *client {
	c := &client{hc: hc, slots: newSlots(concurrency), secret: secret, retryFor: retryFor, pause: targetPause}
	for _, b := range bases {
		c.targets = append(c.targets, &target{base: b})
	}
	return c
}

// pick returns the index of the target of the next try: the first one not avoided,
// starting after prev (prev < 0: at the next one in round-robin order); when every target
// is avoided, the one it started at.
func (c *client) pick(prev int) int {
	n := len(c.targets)
	start := prev + 1
	if prev < 0 {
		start = int((c.next.Add(1) - 1) % uint32(n)) //nolint:gosec // n is a handful of targets
	}
	now := time.Now().UnixNano()
	for i := range n {
		if k := (start + i) % n; c.targets[k].downUntil.Load() <= now {
			return k
		}
	}
	return start % n
}

// problem is an RFC 9457 problem document.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// code returns the orderly error code: the last path segment of the problem's type.
func (p *problem) code() string {
	return p.Type[strings.LastIndex(p.Type, "/")+1:]
}

// httpError is an answer with a status the caller did not expect, or a transport error.
type httpError struct {
	Method, Path string
	Status       int      // 0 for a transport error
	Problem      *problem // set when the body was a problem document
	Body         string   // the start of any other body
	Err          error    // transport or decoding error
	// Tries is the number of times the request was sent (more than 1 when a target did
	// not answer and the request went to another one).
	Tries int
	// noAnswer marks a try that got no complete answer: a transport error or a body cut off.
	noAnswer bool
	// unsent marks a noAnswer try that certainly did not reach the server (the connection
	// was refused).
	unsent bool
	// earlier are the tries before the last that got no answer, as "target: error (at
	// +offset since the first try, taking duration)".
	earlier []string
	// First is when the first try was sent; Elapsed the time from then until the last
	// try ended.
	First   time.Time
	Elapsed time.Duration
}

func (e *httpError) Error() string {
	msg := e.message()
	if e.Tries > 1 {
		msg += fmt.Sprintf(" (after %d tries in %s from %s", e.Tries, e.Elapsed.Round(time.Millisecond), e.First.UTC().Format("15:04:05.000"))
		if len(e.earlier) > 0 {
			msg += "; before: " + strings.Join(e.earlier, "; ")
		}
		msg += ")"
	}
	return msg
}

func (e *httpError) message() string {
	switch {
	case e.Err != nil && e.Status == 0:
		return fmt.Sprintf("%s %s: %v", e.Method, e.Path, e.Err)
	case e.Err != nil:
		return fmt.Sprintf("%s %s: %d: %v", e.Method, e.Path, e.Status, e.Err)
	case e.Problem != nil:
		return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Problem.code(), e.Problem.Detail)
	}
	return fmt.Sprintf("%s %s: %d %q", e.Method, e.Path, e.Status, e.Body)
}

// code returns the problem's orderly error code, "" when there is none.
func (e *httpError) code() string {
	if e.Problem == nil {
		return ""
	}
	return e.Problem.code()
}

// do sends one request with a JSON body (raw bytes or a value to encode; nil for none) and
// decodes a 2xx answer into out (nil to discard). Any other status, a transport error or an
// undecodable body is an *httpError. See send for how a request that gets no answer is
// sent again.
func (c *client) do(ctx context.Context, method, path string, body any, header http.Header, out any) error {
	_, err := c.send(ctx, method, path, body, header, out)
	return err
}

// send is do that also reports whether the request may have taken effect more than once:
// a try got no answer after it may have reached its server, and the request was sent
// again. A request that gets no answer (a transport error, a body cut off) is sent to the
// next target, skipping targets that did not answer in the last targetPause, with a
// growing pause each time every target failed, until one answers or retryFor has passed
// since the first try and every target was tried once after the first failure (a try may
// have waited long on a server that then died). An answer ends it, but for a 409 conflict
// (a row changed concurrently, nothing was done) or payment-started-concurrently (another
// start of the order's payment overlapped, nothing was done), which ask to retry: it is
// sent again up to maxConflictRetries times; and but for a 503 (the server's database
// restarted, ended the session or is busy), which is sent again like a request that got
// no answer. Any other answer is the caller's to judge.
func (c *client) send(ctx context.Context, method, path string, body any, header http.Header, out any) (ambiguous bool, err error) {
	return c.sendAs(ctx, followUp, method, path, body, header, out)
}

// sendNew is send for a request that starts new work (an order's create): it gets a slot
// only when no follow-up request waits for one (see slots).
func (c *client) sendNew(ctx context.Context, method, path string, body any, header http.Header, out any) (ambiguous bool, err error) {
	return c.sendAs(ctx, newWork, method, path, body, header, out)
}

// sendAs is send for a request of class p.
func (c *client) sendAs(ctx context.Context, p priority, method, path string, body any, header http.Header, out any) (ambiguous bool, err error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		if raw, err = json.Marshal(b); err != nil {
			return false, &httpError{Method: method, Path: path, Err: err, Tries: 1}
		}
	}
	queued := time.Now()
	if err := c.slots.acquire(ctx, p); err != nil {
		return false, &httpError{Method: method, Path: path, Err: err, Tries: 1}
	}
	defer c.slots.release()
	c.waited(time.Since(queued))
	deadline := time.Now().Add(c.retryFor)
	backoff := retryBackoffMin
	conflicts := 0
	var earlier []string
	k := c.pick(-1)
	first := time.Now()
	for try := 1; ; try++ {
		began := time.Now()
		err := c.once(ctx, c.targets[k].base, method, path, body != nil, raw, header, out)
		var he *httpError
		if err == nil || !errors.As(err, &he) {
			return ambiguous, err
		}
		he.Tries, he.earlier, he.First, he.Elapsed = try, earlier, first, time.Since(first)
		if he.Status == http.StatusConflict && (he.code() == orderly.ECONFLICT || he.code() == orderly.EPAYMENTRACE) &&
			conflicts < maxConflictRetries && ctx.Err() == nil {
			conflicts++
			if sleepUntil(ctx, time.Now().Add(conflictPause<<(conflicts-1))) != nil {
				return ambiguous, err
			}
			k = c.pick(k)
			continue
		}
		// 503 (the server's database restarted, ended the session or is busy) is sent again
		// like a request that got no answer; its outcome may be unknown too (a connection
		// lost during COMMIT).
		unavailable := he.Status == http.StatusServiceUnavailable
		if (!he.noAnswer && !unavailable) || ctx.Err() != nil || c.retryFor <= 0 || (!time.Now().Before(deadline) && try > len(c.targets)) {
			return ambiguous, err
		}
		ambiguous = ambiguous || !he.unsent
		earlier = append(earlier, fmt.Sprintf("%s: %s (at +%s, taking %s)", c.targets[k].base, errorText(he),
			began.Sub(first).Round(time.Millisecond), time.Since(began).Round(time.Millisecond)))
		c.targets[k].downUntil.Store(time.Now().Add(c.pause).UnixNano())
		c.retries.Add(1)
		if try%len(c.targets) == 0 {
			if sleepUntil(ctx, time.Now().Add(backoff)) != nil {
				return ambiguous, err
			}
			backoff = min(2*backoff, retryBackoffMax)
		}
		k = c.pick(k)
	}
}

// waited records a request's wait for a slot.
func (c *client) waited(d time.Duration) {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	c.waits = append(c.waits, float64(d)/float64(time.Millisecond))
}

// queueWait returns the percentiles of the requests' waits for a slot so far.
func (c *client) queueWait() Percentiles {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	return newPercentiles(slices.Clone(c.waits))
}

// errorText is the cause of a try that got no answer, without the method and addresses.
func errorText(he *httpError) string {
	if he.Err == nil { // an answer (503)
		return he.message()
	}
	var oe *net.OpError
	if errors.As(he.Err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	var ue *url.Error
	if errors.As(he.Err, &ue) {
		return ue.Err.Error()
	}
	return he.Err.Error()
}

// once sends the request to one target; hasBody says whether raw is a body (even empty).
// An Orderly-Signature key in header, whatever its value, has once sign raw with the
// client's secret at the time of sending (payment.Sign).
func (c *client) once(ctx context.Context, base, method, path string, hasBody bool, raw []byte, header http.Header, out any) error {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return &httpError{Method: method, Path: path, Err: err}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if _, ok := header[payment.SignatureHeader]; ok {
		// Signed now, not when the caller asked: the wait for a free slot and the tries
		// before may have taken long, and the server refuses stale signatures.
		req.Header.Set(payment.SignatureHeader, payment.Sign(c.secret, time.Now(), raw))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &httpError{Method: method, Path: path, Err: err, noAnswer: true, unsent: refused(err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &httpError{Method: method, Path: path, Status: resp.StatusCode, Err: err, noAnswer: true}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &httpError{Method: method, Path: path, Status: resp.StatusCode}
		var p problem
		if json.Unmarshal(data, &p) == nil && p.Type != "" {
			e.Problem = &p
		} else {
			e.Body = string(data[:min(len(data), 200)])
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &httpError{Method: method, Path: path, Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err)}
		}
	}
	return nil
}

// refused reports whether a transport error says the connection could not be made: the
// request never reached a server.
func refused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

func (c *client) setStock(ctx context.Context, sku string, available int64) error {
	return c.do(ctx, http.MethodPut, "/v1/inventory/"+url.PathEscape(sku), map[string]int64{"available": available}, nil, nil)
}

func (c *client) stock(ctx context.Context, sku string) (*orderly.Stock, error) {
	var s orderly.Stock
	return &s, c.do(ctx, http.MethodGet, "/v1/inventory/"+url.PathEscape(sku), nil, nil, &s)
}

type couponRequest struct {
	UserID    string `json:"user_id"`
	AmountOff int64  `json:"amount_off"`
	Currency  string `json:"currency"`
}

func (c *client) createCoupon(ctx context.Context, userID string, amountOff int64, currency string) (*orderly.Coupon, error) {
	var cp orderly.Coupon
	err := c.do(ctx, http.MethodPost, "/v1/coupons", &couponRequest{UserID: userID, AmountOff: amountOff, Currency: currency}, nil, &cp)
	if err == nil && cp.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: "/v1/coupons", Status: http.StatusCreated, Err: fmt.Errorf("answer has no coupon id")}
	}
	return &cp, err
}

func (c *client) coupon(ctx context.Context, id string) (*orderly.Coupon, error) {
	var cp orderly.Coupon
	return &cp, c.do(ctx, http.MethodGet, "/v1/coupons/"+url.PathEscape(id), nil, nil, &cp)
}

// orderRequest is the body of POST /v1/orders.
type orderRequest struct {
	UserID                string         `json:"user_id"`
	Items                 []orderly.Item `json:"items"`
	Currency              string         `json:"currency"`
	CouponID              string         `json:"coupon_id,omitempty"`
	PaymentTimeoutSeconds int64          `json:"payment_timeout_seconds"`
}

// createOrder creates an order; ambiguous reports that a try without answer may have
// created it, so that the answer (the same order, by its Idempotency-Key) shows it as it is
// now, not as created.
func (c *client) createOrder(ctx context.Context, req *orderRequest, idempotencyKey string) (o *orderly.Order, ambiguous bool, err error) {
	o = &orderly.Order{}
	ambiguous, err = c.sendNew(ctx, http.MethodPost, "/v1/orders", req, http.Header{"Idempotency-Key": {idempotencyKey}}, o)
	if err == nil && o.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: "/v1/orders", Status: http.StatusCreated, Err: fmt.Errorf("answer has no order id")}
	}
	return o, ambiguous, err
}

// maybeAppliedBefore reports whether err is a 409 illegal-transition answered to a request
// sent more than once: its first try may have taken effect on an instance that died before
// answering, and moved the order (or trip) past the state the event leaves; the caller
// reads it to tell.
func maybeAppliedBefore(err error) bool {
	var he *httpError
	return errors.As(err, &he) && he.Tries > 1 && he.code() == orderly.EILLEGAL
}

func (c *client) order(ctx context.Context, id string) (*orderly.Order, error) {
	var o orderly.Order
	return &o, c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(id), nil, nil, &o)
}

// cancel cancels an order; ambiguous reports that a try without answer may have cancelled
// it before the one that answered (which then finds it closed).
func (c *client) cancel(ctx context.Context, id string) (o *orderly.Order, ambiguous bool, err error) {
	o = &orderly.Order{}
	ambiguous, err = c.send(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(id)+"/cancel", nil, nil, o)
	return o, ambiguous, err
}

// startPayment starts a payment attempt; ambiguous reports that a try without answer may
// have started another attempt, unknown to the caller.
func (c *client) startPayment(ctx context.Context, orderID string) (p *orderly.Payment, ambiguous bool, err error) {
	p = &orderly.Payment{}
	path := "/v1/orders/" + url.PathEscape(orderID) + "/payments"
	ambiguous, err = c.send(ctx, http.MethodPost, path, nil, nil, p)
	if err == nil && p.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: path, Status: http.StatusCreated, Err: fmt.Errorf("answer has no payment_id")}
	}
	return p, ambiguous, err
}

func (c *client) payments(ctx context.Context, orderID string) ([]*orderly.Payment, error) {
	var out struct {
		Payments []*orderly.Payment `json:"payments"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(orderID)+"/payments", nil, nil, &out)
	return out.Payments, err
}

// callbackBody is the body of POST /v1/payments/callback.
type callbackBody struct {
	PaymentID    string `json:"payment_id"`
	OrderID      string `json:"order_id"`
	ChannelTxnID string `json:"channel_txn_id"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Status       string `json:"status"`
	OccurredAt   string `json:"occurred_at"`
}

// encodeCallback returns the JSON of a callback, the exact bytes that are signed.
func encodeCallback(cb *callbackBody) []byte {
	b, err := json.Marshal(cb)
	if err != nil {
		panic(err) // strings and integers always encode
	}
	return b
}

// callback posts a callback body, signed as each try is sent; anything but 200 is an error.
func (c *client) callback(ctx context.Context, body []byte) error {
	if c.provider != nil {
		var cb callbackBody
		if err := json.Unmarshal(body, &cb); err != nil {
			return fmt.Errorf("callback body: %w", err)
		}
		path, ev, header, err := c.provider.Webhook(cb.PaymentID, cb.Status)
		if errors.Is(err, ErrNoWebhook) {
			return nil
		}
		if err != nil {
			return err
		}
		return c.do(ctx, http.MethodPost, path, ev, header, nil)
	}
	return c.do(ctx, http.MethodPost, "/v1/payments/callback", body, http.Header{payment.SignatureHeader: nil}, nil)
}

// timeLayout is the HTTP contract's time format: RFC 3339 UTC with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
