// Package stripetest is an imitation of Stripe's API for tests and simulations: a local
// HTTP server (httptest) that keeps payment intents and refunds, answers the calls the
// Stripe channel makes (create, retrieve, search, cancel, refund, with Idempotency-Key
// replay) and sends signed webhook events to a URL, with duplicates and out-of-order
// delivery on request. No network beyond the loopback.
package stripetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly/channel/stripe"
)

// Test credentials of the imitation. WebhookSecret is the secret stripe-go's webhook tests
// sign with.
const (
	APIKey        = "sk_test_orderly"
	WebhookSecret = "whsec_test_secret" //nolint:gosec // G101: a published test secret, never a real one
)

// CancelMode says how the imitation answers a cancel.
type CancelMode int

// Cancel modes.
const (
	CancelNormally   CancelMode = iota // cancels an intent that is not succeeded
	CancelPaysFirst                    // the buyer's payment lands first: "already succeeded"
	CancelUnknown                      // 500 every time: the provider cannot tell
	CancelProcessing                   // the intent is processing: unexpected state, processing
)

// Intent is a payment intent as the imitation keeps it.
type Intent struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountReceived int64             `json:"amount_received"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	Metadata       map[string]string `json:"metadata"`
	Created        int64             `json:"created"`
}

// Refund is a refund as the imitation keeps it.
type Refund struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	FailureReason string            `json:"failure_reason,omitempty"`
	PaymentIntent string            `json:"payment_intent"`
	Metadata      map[string]string `json:"metadata"`
}

type answer struct {
	status int
	body   []byte
}

// Server is the imitation. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	// Now is the clock of event timestamps and signatures; time.Now.
	Now func() time.Time

	mu        sync.Mutex
	seq       int
	intents   map[string]*Intent // by id
	byPayment map[string]string  // orderly payment id → intent id
	refunds   map[string]*Refund // by id
	idem      map[string]*answer // Idempotency-Key → first answer
	cancel    CancelMode
	calls     map[string]int // "create", "cancel", "refund", "retrieve", "search"
	webhook   string
	client    *http.Client
}

// NewServer starts an imitation; it is closed by Close.
func NewServer() *Server {
	s := &Server{Now: time.Now, intents: map[string]*Intent{}, byPayment: map[string]string{}, refunds: map[string]*Refund{},
		idem: map[string]*answer{}, calls: map[string]int{}, client: &http.Client{Timeout: 10 * time.Second}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.idempotent("create", s.create))
	mux.HandleFunc("GET /v1/payment_intents/search", s.authed("search", s.search))
	mux.HandleFunc("GET /v1/payment_intents/{id}", s.authed("retrieve", s.retrieve))
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.idempotent("cancel", s.cancelIntent))
	mux.HandleFunc("POST /v1/refunds", s.idempotent("refund", s.refund))
	s.Server = httptest.NewServer(mux)
	return s
}

// SetWebhook sets the URL events are delivered to (orderly's /v1/channels/stripe/webhook).
func (s *Server) SetWebhook(url string) { s.mu.Lock(); s.webhook = url; s.mu.Unlock() }

// SetCancelMode sets how cancels are answered from now on.
func (s *Server) SetCancelMode(m CancelMode) { s.mu.Lock(); s.cancel = m; s.mu.Unlock() }

// Calls returns how many calls of op ("create", "cancel", "refund", "retrieve", "search")
// reached the imitation, replays of an idempotency key included.
func (s *Server) Calls(op string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls[op] }

// Intent returns a copy of the intent of orderly payment paymentID; ok=false if none.
func (s *Server) Intent(paymentID string) (Intent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[s.byPayment[paymentID]]
	if !ok {
		return Intent{}, false
	}
	return *in, true
}

// Refunds returns copies of the refunds of the intent of orderly payment paymentID.
func (s *Server) Refunds(paymentID string) []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Refund
	for _, r := range s.refunds {
		if r.PaymentIntent == s.byPayment[paymentID] {
			out = append(out, *r)
		}
	}
	return out
}

func (s *Server) newID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s_%06d", prefix, s.seq)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(status int, code, msg string, pi *Intent) (int, any) {
	e := map[string]any{"type": "invalid_request_error", "code": code, "message": msg}
	if pi != nil {
		e["payment_intent"] = pi
	}
	return status, map[string]any{"error": e}
}

// authed checks the API key and counts the call.
func (s *Server) authed(op string, h func(r *http.Request) (int, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+APIKey {
			status, v := apiError(http.StatusUnauthorized, "api_key_invalid", "Invalid API Key provided", nil)
			writeJSON(w, status, v)
			return
		}
		s.mu.Lock()
		s.calls[op]++
		s.mu.Unlock()
		status, v := h(r)
		writeJSON(w, status, v)
	}
}

// idempotent is authed with Stripe's Idempotency-Key replay: the first answer (2xx or 4xx)
// to a key is answered again, unchanged, to every request with it.
func (s *Server) idempotent(op string, h func(r *http.Request) (int, any)) http.HandlerFunc {
	return s.authed(op, func(r *http.Request) (int, any) {
		key := r.Header.Get("Idempotency-Key")
		s.mu.Lock()
		prev := s.idem[key]
		s.mu.Unlock()
		if key != "" && prev != nil {
			return prev.status, json.RawMessage(prev.body)
		}
		status, v := h(r)
		if key != "" && status < 500 {
			b, _ := json.Marshal(v)
			s.mu.Lock()
			s.idem[key] = &answer{status: status, body: b}
			s.mu.Unlock()
		}
		return status, v
	})
}

func (s *Server) create(r *http.Request) (int, any) {
	if err := r.ParseForm(); err != nil {
		return apiError(http.StatusBadRequest, "parameter_invalid", err.Error(), nil)
	}
	amount, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	if err != nil || amount <= 0 {
		return apiError(http.StatusBadRequest, "parameter_invalid_integer", "amount must be a positive integer", nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := &Intent{ID: s.newID("pi"), Object: "payment_intent", Amount: amount, Currency: r.PostForm.Get("currency"),
		Status: "requires_payment_method", Created: s.Now().Unix(), Metadata: map[string]string{}}
	for k, v := range r.PostForm {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			in.Metadata[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	s.intents[in.ID] = in
	s.byPayment[in.Metadata[stripe.MetadataPaymentID]] = in.ID
	return http.StatusOK, *in
}

func (s *Server) search(r *http.Request) (int, any) {
	q := r.URL.Query().Get("query") // metadata['payment_id']:'<id>'
	_, v, _ := strings.Cut(q, ":")
	id := strings.Trim(v, "'")
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []Intent{}
	if in, ok := s.intents[s.byPayment[id]]; ok {
		data = append(data, *in)
	}
	return http.StatusOK, map[string]any{"object": "search_result", "data": data}
}

func (s *Server) retrieve(r *http.Request) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[r.PathValue("id")]
	if !ok {
		return apiError(http.StatusNotFound, "resource_missing", "No such payment_intent", nil)
	}
	return http.StatusOK, *in
}

func (s *Server) cancelIntent(r *http.Request) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[r.PathValue("id")]
	if !ok {
		return apiError(http.StatusNotFound, "resource_missing", "No such payment_intent", nil)
	}
	switch s.cancel {
	case CancelUnknown:
		return apiError(http.StatusInternalServerError, "api_error", "An unknown error occurred", nil)
	case CancelPaysFirst:
		if in.Status != "canceled" {
			in.Status, in.AmountReceived = "succeeded", in.Amount
		}
	case CancelProcessing:
		if in.Status != "succeeded" && in.Status != "canceled" {
			in.Status = "processing"
		}
	}
	switch in.Status {
	case "succeeded", "processing", "canceled":
		cp := *in
		return apiError(http.StatusBadRequest, "payment_intent_unexpected_state",
			"You cannot cancel this PaymentIntent because it has a status of "+in.Status+".", &cp)
	}
	in.Status = "canceled"
	return http.StatusOK, *in
}

func (s *Server) refund(r *http.Request) (int, any) {
	if err := r.ParseForm(); err != nil {
		return apiError(http.StatusBadRequest, "parameter_invalid", err.Error(), nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[r.PostForm.Get("payment_intent")]
	if !ok || in.Status != "succeeded" {
		return apiError(http.StatusBadRequest, "charge_not_refundable", "the payment intent has no successful charge", nil)
	}
	var refunded int64
	for _, f := range s.refunds {
		if f.PaymentIntent == in.ID && f.Status == "succeeded" {
			refunded += f.Amount
		}
	}
	amount := in.AmountReceived - refunded
	if a := r.PostForm.Get("amount"); a != "" {
		amount, _ = strconv.ParseInt(a, 10, 64)
	}
	if amount <= 0 || refunded+amount > in.AmountReceived {
		return apiError(http.StatusBadRequest, "amount_too_large", "Refund amount is greater than unrefunded amount on charge", nil)
	}
	f := &Refund{ID: s.newID("re"), Object: "refund", Amount: amount, Currency: in.Currency, Status: "succeeded",
		PaymentIntent: in.ID, Metadata: map[string]string{}}
	for k, v := range r.PostForm {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			f.Metadata[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	s.refunds[f.ID] = f
	return http.StatusOK, *f
}

// Pay captures the intent of orderly payment paymentID (the buyer paid) and returns the
// payment_intent.succeeded event. ok=false when there is no such intent or it was
// cancelled.
func (s *Server) Pay(paymentID string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[s.byPayment[paymentID]]
	if !found || in.Status == "canceled" {
		return nil, false
	}
	in.Status, in.AmountReceived = "succeeded", in.Amount
	return s.event("payment_intent.succeeded", *in), true
}

// PayLate captures the intent of paymentID even if it was cancelled: money that reached
// the provider although orderly closed the payment (a delayed payment method settling
// late). It returns the payment_intent.succeeded event; ok=false when there is no intent.
func (s *Server) PayLate(paymentID string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[s.byPayment[paymentID]]
	if !found {
		return nil, false
	}
	in.Status, in.AmountReceived = "succeeded", in.Amount
	return s.event("payment_intent.succeeded", *in), true
}

// Fail fails the buyer's attempt on the intent of paymentID (it may be tried again) and
// returns the payment_intent.payment_failed event (payment_intent.canceled for a cancelled
// intent); ok=false when there is no intent or it succeeded.
func (s *Server) Fail(paymentID string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[s.byPayment[paymentID]]
	if !found || in.Status == "succeeded" {
		return nil, false
	}
	if in.Status == "canceled" {
		return s.event("payment_intent.canceled", *in), true
	}
	in.Status = "requires_payment_method"
	return s.event("payment_intent.payment_failed", *in), true
}

// CheckoutAsync is a Checkout Session paid with a delayed method: it returns the
// checkout.session.completed event with payment_status "unpaid" and, the intent captured,
// the later checkout.session.async_payment_succeeded event.
func (s *Server) CheckoutAsync(paymentID string) (completed, succeeded []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[s.byPayment[paymentID]]
	if !found || in.Status == "canceled" {
		return nil, nil, false
	}
	session := map[string]any{"id": s.newID("cs"), "object": "checkout.session", "amount_total": in.Amount,
		"currency": in.Currency, "payment_intent": in.ID, "client_reference_id": paymentID,
		"payment_status": "unpaid", "status": "complete", "metadata": map[string]string{}}
	completed = s.event("checkout.session.completed", session)
	in.Status, in.AmountReceived = "succeeded", in.Amount
	session["payment_status"] = "paid"
	return completed, s.event("checkout.session.async_payment_succeeded", session), true
}

// RefundEvent returns the refund.updated event of every refund of paymentID's intent.
func (s *Server) RefundEvent(paymentID string) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, f := range s.refunds {
		if f.PaymentIntent == s.byPayment[paymentID] {
			out = append(out, s.event("refund.updated", *f))
		}
	}
	return out
}

// FailRefund fails the refund whose metadata[key] is value (orderly's refund id under
// "refund_id"), as Stripe does when the bank returns a refund after it succeeded: status
// failed with failure_reason, and returns its refund.updated event. ok=false when there is
// no such refund.
func (s *Server) FailRefund(key, value, reason string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.refunds {
		if f.Metadata[key] == value {
			f.Status, f.FailureReason = "failed", reason
			return s.event("refund.updated", *f), true
		}
	}
	return nil, false
}

// event returns an event of type typ about obj, as Stripe serialises it.
func (s *Server) event(typ string, obj any) []byte {
	b, _ := json.Marshal(map[string]any{"id": s.newID("evt"), "object": "event", "api_version": "2025-01-27",
		"type": typ, "created": s.Now().Unix(), "livemode": false, "data": map[string]any{"object": obj}})
	return b
}

// Send delivers one event to the webhook URL, signed at Now with WebhookSecret, and
// returns the HTTP status.
func (s *Server) Send(ctx context.Context, event []byte) (int, error) {
	s.mu.Lock()
	url := s.webhook
	s.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(event))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(stripe.SignatureHeader, stripe.Sign(WebhookSecret, s.Now(), event))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// Deliver sends events as Stripe may: each copies times (retries and duplicates), all
// copies in parallel and, with shuffle, in random order (rnd; nil means a fixed seed).
// It returns the statuses of the deliveries in the order they were made.
func (s *Server) Deliver(ctx context.Context, events [][]byte, copies int, shuffle bool, rnd *rand.Rand) ([]int, error) {
	var all [][]byte
	for _, e := range events {
		for range max(copies, 1) {
			all = append(all, e)
		}
	}
	if shuffle {
		if rnd == nil {
			rnd = rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: a reproducible delivery order, not a secret
		}
		rnd.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	}
	statuses := make([]int, len(all))
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, e := range all {
		wg.Go(func() { statuses[i], errs[i] = s.Send(ctx, e) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return statuses, err
		}
	}
	return statuses, nil
}
