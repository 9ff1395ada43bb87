package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// maxResponseBytes bounds what the client reads of one response.
const maxResponseBytes = 1 << 20

// client speaks the HTTP contract of DESIGN.md §7. A semaphore caps the requests in flight.
type client struct {
	base   string
	hc     *http.Client
	sem    chan struct{}
	secret []byte
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
}

func (e *httpError) Error() string {
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
// undecodable body is an *httpError.
func (c *client) do(ctx context.Context, method, path string, body any, header http.Header, out any) error {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return &httpError{Method: method, Path: path, Err: ctx.Err()}
	}
	defer func() { <-c.sem }()

	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return &httpError{Method: method, Path: path, Err: err}
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return &httpError{Method: method, Path: path, Err: err}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &httpError{Method: method, Path: path, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return &httpError{Method: method, Path: path, Status: resp.StatusCode, Err: err}
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

func (c *client) createOrder(ctx context.Context, req *orderRequest, idempotencyKey string) (*orderly.Order, error) {
	var o orderly.Order
	err := c.do(ctx, http.MethodPost, "/v1/orders", req, http.Header{"Idempotency-Key": {idempotencyKey}}, &o)
	if err == nil && o.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: "/v1/orders", Status: http.StatusCreated, Err: fmt.Errorf("answer has no order id")}
	}
	return &o, err
}

func (c *client) order(ctx context.Context, id string) (*orderly.Order, error) {
	var o orderly.Order
	return &o, c.do(ctx, http.MethodGet, "/v1/orders/"+url.PathEscape(id), nil, nil, &o)
}

func (c *client) cancel(ctx context.Context, id string) (*orderly.Order, error) {
	var o orderly.Order
	return &o, c.do(ctx, http.MethodPost, "/v1/orders/"+url.PathEscape(id)+"/cancel", nil, nil, &o)
}

func (c *client) startPayment(ctx context.Context, orderID string) (*orderly.Payment, error) {
	var p orderly.Payment
	path := "/v1/orders/" + url.PathEscape(orderID) + "/payments"
	err := c.do(ctx, http.MethodPost, path, nil, nil, &p)
	if err == nil && p.ID == "" {
		err = &httpError{Method: http.MethodPost, Path: path, Status: http.StatusCreated, Err: fmt.Errorf("answer has no payment_id")}
	}
	return &p, err
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

// callback posts a callback body, signed now; anything but 200 is an error.
func (c *client) callback(ctx context.Context, body []byte) error {
	h := http.Header{payment.SignatureHeader: {payment.Sign(c.secret, time.Now(), body)}}
	return c.do(ctx, http.MethodPost, "/v1/payments/callback", body, h, nil)
}

// timeLayout is the HTTP contract's time format: RFC 3339 UTC with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }
