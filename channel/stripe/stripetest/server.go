// Package stripetest is an imitation of Stripe's API for tests, simulations and `orderly
// imitate stripe`: an HTTP server that keeps payment intents and refunds and answers as
// Stripe's API reference says. The merchant's calls (secret key APIKey): create, retrieve,
// search, cancel a PaymentIntent; create, retrieve and list refunds; each with
// Idempotency-Key replay (the first answer again; other parameters under the same key
// refused). The buyer's client step (publishable key PublishableKey plus the intent's
// client_secret, as Stripe.js sends them): confirm a PaymentIntent with a test payment
// method (PaymentMethod*). Refunds answer the status SetRefundStatus chose (pending, as
// Stripe does for many methods) and settle later (SettleRefund). Signed webhook events are
// delivered to the URL of SetWebhook, with retries, as the objects change; tests may also
// take events (Pay, Fail, …) and deliver them themselves, duplicated and out of order.
// Routes under /_imitation/ are the imitation's own controls, not Stripe's. No network
// beyond the listener.
package stripetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orderlyhq/orderly/channel/stripe"
)

// Test credentials of the imitation. WebhookSecret is the secret stripe-go's webhook tests
// sign with.
const (
	APIKey         = "sk_test_orderly"
	PublishableKey = "pk_test_orderly"
	WebhookSecret  = "whsec_test_secret" //nolint:gosec // G101: a published test secret, never a real one
)

// Test payment methods of the client step, named as Stripe's test PaymentMethods
// (docs.stripe.com/testing). Any other "pm_card_…" succeeds like PaymentMethodVisa.
const (
	PaymentMethodVisa = "pm_card_visa" // succeeded
	// PaymentMethodAuthRequired asks for 3D Secure: requires_action until Authenticate.
	PaymentMethodAuthRequired = "pm_card_authenticationRequired"
	// PaymentMethodDeclined is declined: 402 card_declined, the intent back to
	// requires_payment_method, payment_intent.payment_failed sent.
	PaymentMethodDeclined = "pm_card_chargeDeclined"
	// PaymentMethodDelayed is a bank debit: processing until SettleIntent.
	PaymentMethodDelayed = "pm_usBankAccount"
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
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	AmountReceived   int64             `json:"amount_received"`
	Currency         string            `json:"currency"`
	Status           string            `json:"status"`
	ClientSecret     string            `json:"client_secret"`
	PaymentMethod    string            `json:"payment_method"`
	LatestCharge     string            `json:"latest_charge"`
	NextAction       map[string]any    `json:"next_action"`
	LastPaymentError map[string]any    `json:"last_payment_error"`
	Metadata         map[string]string `json:"metadata"`
	Created          int64             `json:"created"`
	Livemode         bool              `json:"livemode"`
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
	Charge        string            `json:"charge"`
	Metadata      map[string]string `json:"metadata"`
	Created       int64             `json:"created"`
}

// Delivery is one webhook delivery the imitation made on its own (SetWebhook).
type Delivery struct {
	Type    string // the event type
	EventID string
	Status  int // the HTTP status answered; 0 when the request failed
}

type answer struct {
	status int
	body   []byte
	params string // the request's method, path and parameters, compared on replay
}

// Server is the imitation. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	// Now is the clock of event timestamps and signatures; time.Now.
	Now func() time.Time
	// SearchLag is how long a new intent stays out of search results: Stripe documents
	// search as not read-after-write (data is usually searchable within a minute). 1 minute.
	SearchLag time.Duration
	// EventVersion is the api_version events are rendered with; stripe.APIVersion (the
	// webhook endpoint created with the version orderly pins).
	EventVersion string

	mu         sync.Mutex
	seq        int
	intents    map[string]*Intent // by id
	byPayment  map[string]string  // orderly payment id → intent id
	refunds    map[string]*Refund // by id
	refundList []string           // refund ids, oldest first
	idem       map[string]*answer // Idempotency-Key → first answer
	cancel     CancelMode
	refundTo   string         // the status new refunds are answered with
	calls      map[string]int // "create", "cancel", "refund", "retrieve", "search", …
	versions   map[string]int // Stripe-Version of the merchant's calls → count
	webhook    string
	deliveries []Delivery

	client    *http.Client
	stop      chan struct{}
	stopOnce  sync.Once
	deliverWG sync.WaitGroup
}

// NewServer starts an imitation on a loopback port; it is closed by Close.
func NewServer() *Server {
	s := newServer()
	s.Server = httptest.NewServer(s.routes())
	return s
}

// NewServerOn starts an imitation on ln (e.g. net.Listen("tcp", "127.0.0.1:12111")); its
// URL is http:// and ln's address. Close closes ln.
func NewServerOn(ln net.Listener) *Server {
	s := newServer()
	s.Server = httptest.NewUnstartedServer(s.routes())
	_ = s.Listener.Close()
	s.Listener = ln
	s.Start()
	return s
}

func newServer() *Server {
	return &Server{Now: time.Now, SearchLag: time.Minute, EventVersion: stripe.APIVersion,
		intents: map[string]*Intent{}, byPayment: map[string]string{}, refunds: map[string]*Refund{},
		idem: map[string]*answer{}, calls: map[string]int{}, versions: map[string]int{}, refundTo: "succeeded",
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}, stop: make(chan struct{})}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/payment_intents", s.secret("create", s.idempotent(s.create)))
	mux.HandleFunc("GET /v1/payment_intents/search", s.secret("search", s.search))
	mux.HandleFunc("GET /v1/payment_intents/{id}", s.buyer("retrieve", s.retrieve))
	mux.HandleFunc("POST /v1/payment_intents/{id}/confirm", s.buyer("confirm", s.idempotent(s.confirm)))
	mux.HandleFunc("POST /v1/payment_intents/{id}/cancel", s.secret("cancel", s.idempotent(s.cancelIntent)))
	mux.HandleFunc("POST /v1/refunds", s.secret("refund", s.idempotent(s.refund)))
	mux.HandleFunc("GET /v1/refunds/{id}", s.secret("refund_retrieve", s.retrieveRefund))
	mux.HandleFunc("GET /v1/refunds", s.secret("refund_list", s.listRefunds))
	mux.HandleFunc("POST /_imitation/payment_intents/{id}/authenticate", s.secret("authenticate", s.authenticateHTTP))
	mux.HandleFunc("POST /_imitation/payment_intents/{id}/settle", s.secret("settle", s.settleIntentHTTP))
	mux.HandleFunc("POST /_imitation/refunds/{id}/settle", s.secret("refund_settle", s.settleRefundHTTP))
	mux.HandleFunc("POST /_imitation/refund_status", s.secret("refund_status", s.refundStatusHTTP))
	return mux
}

// Close stops the webhook deliveries under way, then the server.
func (s *Server) Close() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.deliverWG.Wait()
	s.Server.Close()
	s.client.CloseIdleConnections()
}

// SetWebhook sets the URL events are delivered to (orderly's /v1/channels/stripe/webhook);
// "" delivers nothing on its own.
func (s *Server) SetWebhook(url string) { s.mu.Lock(); s.webhook = url; s.mu.Unlock() }

// SetCancelMode sets how cancels are answered from now on.
func (s *Server) SetCancelMode(m CancelMode) { s.mu.Lock(); s.cancel = m; s.mu.Unlock() }

// SetRefundStatus sets the status new refunds are created with: "succeeded" (the default),
// "pending" or "requires_action" (settled later by SettleRefund).
func (s *Server) SetRefundStatus(status string) { s.mu.Lock(); s.refundTo = status; s.mu.Unlock() }

// Calls returns how many calls of op reached the imitation, replays of an idempotency key
// included: "create", "retrieve", "search", "confirm", "cancel", "refund",
// "refund_retrieve", "refund_list".
func (s *Server) Calls(op string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls[op] }

// Versions returns how many calls made with the secret key carried each Stripe-Version
// header value ("" for none).
func (s *Server) Versions() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.versions))
	for k, v := range s.versions {
		out[k] = v
	}
	return out
}

// Deliveries returns the webhook deliveries made on the imitation's own, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

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

// Refunds returns copies of the refunds of the intent of orderly payment paymentID, oldest
// first.
func (s *Server) Refunds(paymentID string) []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Refund
	for _, id := range s.refundList {
		if r := s.refunds[id]; r.PaymentIntent == s.byPayment[paymentID] {
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

func apiError(status int, typ, code, msg string, pi *Intent) (int, any) {
	e := map[string]any{"type": typ, "code": code, "message": msg}
	if pi != nil {
		e["payment_intent"] = pi
	}
	return status, map[string]any{"error": e}
}

func invalid(status int, code, msg string) (int, any) {
	return apiError(status, "invalid_request_error", code, msg, nil)
}

// key returns the API key of r: Bearer, HTTP Basic with the key as user name (curl -u
// sk_…:), or the form field key (Stripe.js).
func key(r *http.Request) string {
	if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return k
	}
	if u, _, ok := r.BasicAuth(); ok {
		return u
	}
	_ = r.ParseForm()
	return r.Form.Get("key")
}

type handler func(r *http.Request, publishable bool) (int, any)

// secret admits calls made with the secret key only, counts them and their version.
func (s *Server) secret(op string, h handler) http.HandlerFunc {
	return s.auth(op, false, h)
}

// buyer admits calls made with the secret key, or with the publishable key and the
// intent's client_secret (checked by h).
func (s *Server) buyer(op string, h handler) http.HandlerFunc {
	return s.auth(op, true, h)
}

func (s *Server) auth(op string, publishableOK bool, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		k := key(r)
		publishable := k == PublishableKey
		if k != APIKey && (!publishable || !publishableOK) {
			msg := "Invalid API Key provided"
			if publishable {
				msg = "This API call cannot be made with a publishable API key. Please use a secret API key."
			}
			status, v := apiError(http.StatusUnauthorized, "invalid_request_error", "api_key_invalid", msg, nil)
			writeJSON(w, status, v)
			return
		}
		s.mu.Lock()
		s.calls[op]++
		if !publishable {
			s.versions[r.Header.Get(stripe.VersionHeader)]++
		}
		s.mu.Unlock()
		status, v := h(r, publishable)
		writeJSON(w, status, v)
	}
}

// idempotent adds Stripe's Idempotency-Key replay to h: the first answer (2xx or 4xx) to
// a key is answered again, unchanged, to every request with it and the same parameters; a
// request with other parameters under the key is refused (idempotency_error).
func (s *Server) idempotent(h handler) handler {
	return func(r *http.Request, publishable bool) (int, any) {
		k := r.Header.Get("Idempotency-Key")
		if k == "" {
			return h(r, publishable)
		}
		_ = r.ParseForm()
		params := r.Method + " " + r.URL.Path + "?" + r.PostForm.Encode()
		s.mu.Lock()
		prev := s.idem[k]
		s.mu.Unlock()
		if prev != nil {
			if prev.params != params {
				return apiError(http.StatusBadRequest, "idempotency_error", "",
					"Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '"+k+"' if you meant to execute a different request.", nil)
			}
			return prev.status, json.RawMessage(prev.body)
		}
		status, v := h(r, publishable)
		if status < 500 {
			b, _ := json.Marshal(v)
			s.mu.Lock()
			s.idem[k] = &answer{status: status, body: b, params: params}
			s.mu.Unlock()
		}
		return status, v
	}
}

func clientSecret(id string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return id + "_secret_" + hex.EncodeToString(b)
}

func (s *Server) create(r *http.Request, _ bool) (int, any) {
	if err := r.ParseForm(); err != nil {
		return invalid(http.StatusBadRequest, "parameter_invalid", err.Error())
	}
	amount, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	if err != nil || amount <= 0 {
		return invalid(http.StatusBadRequest, "parameter_invalid_integer", "amount must be a positive integer")
	}
	if r.PostForm.Get("currency") == "" {
		return invalid(http.StatusBadRequest, "parameter_missing", "Missing required param: currency.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.newID("pi")
	in := &Intent{ID: id, Object: "payment_intent", Amount: amount, Currency: r.PostForm.Get("currency"),
		Status: "requires_payment_method", ClientSecret: clientSecret(id), Created: s.Now().Unix(), Metadata: metadata(r.PostForm)}
	s.intents[in.ID] = in
	s.byPayment[in.Metadata[stripe.MetadataPaymentID]] = in.ID
	return http.StatusOK, *in
}

func metadata(form url.Values) map[string]string {
	m := map[string]string{}
	for k, v := range form {
		if name, ok := strings.CutPrefix(k, "metadata["); ok {
			m[strings.TrimSuffix(name, "]")] = v[0]
		}
	}
	return m
}

// search answers metadata['payment_id']:'<id>' queries, leaving out intents younger than
// SearchLag.
func (s *Server) search(r *http.Request, _ bool) (int, any) {
	q := r.URL.Query().Get("query")
	_, v, _ := strings.Cut(q, ":")
	id := strings.Trim(v, "'")
	s.mu.Lock()
	defer s.mu.Unlock()
	data := []Intent{}
	if in, ok := s.intents[s.byPayment[id]]; ok && s.Now().Unix()-in.Created >= int64(s.SearchLag/time.Second) {
		data = append(data, *in)
	}
	return http.StatusOK, map[string]any{"object": "search_result", "data": data, "has_more": false}
}

// forClient finds intent id for a call: with the publishable key, form or query
// client_secret must be the intent's. The caller holds s.mu.
func (s *Server) forClient(r *http.Request, publishable bool) (*Intent, int, any) {
	in, ok := s.intents[r.PathValue("id")]
	if !ok {
		status, v := invalid(http.StatusNotFound, "resource_missing", "No such payment_intent: '"+r.PathValue("id")+"'")
		return nil, status, v
	}
	if publishable && r.Form.Get("client_secret") != in.ClientSecret {
		status, v := invalid(http.StatusBadRequest, "payment_intent_invalid_parameter",
			"The client_secret provided does not match the client_secret associated with the PaymentIntent.")
		return nil, status, v
	}
	return in, 0, nil
}

// clientView is the intent as a publishable key sees it: no metadata.
func clientView(in Intent, publishable bool) Intent {
	if publishable {
		in.Metadata = nil
	}
	return in
}

func (s *Server) retrieve(r *http.Request, publishable bool) (int, any) {
	_ = r.ParseForm()
	s.mu.Lock()
	defer s.mu.Unlock()
	in, status, v := s.forClient(r, publishable)
	if in == nil {
		return status, v
	}
	return http.StatusOK, clientView(*in, publishable)
}

// confirm is the buyer's client step: payment_method decides the outcome (see the
// PaymentMethod constants); the intent's event is delivered.
func (s *Server) confirm(r *http.Request, publishable bool) (int, any) {
	if err := r.ParseForm(); err != nil {
		return invalid(http.StatusBadRequest, "parameter_invalid", err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, status, v := s.forClient(r, publishable)
	if in == nil {
		return status, v
	}
	switch in.Status {
	case "requires_payment_method", "requires_confirmation", "requires_action":
	default:
		cp := clientView(*in, publishable)
		return apiError(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state",
			"This PaymentIntent's payment_method could not be updated because it has a status of "+in.Status+".", &cp)
	}
	pm := r.PostForm.Get("payment_method")
	in.PaymentMethod, in.NextAction, in.LastPaymentError = pm, nil, nil
	switch {
	case pm == PaymentMethodAuthRequired:
		in.Status = "requires_action"
		in.NextAction = map[string]any{"type": "use_stripe_sdk", "use_stripe_sdk": map[string]any{"type": "three_d_secure_redirect",
			"stripe_js": s.URL + "/_imitation/payment_intents/" + in.ID + "/authenticate"}}
		s.deliverLocked("payment_intent.requires_action", *in)
	case pm == PaymentMethodDeclined:
		in.Status = "requires_payment_method"
		in.LastPaymentError = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
			"message": "Your card was declined."}
		s.deliverLocked("payment_intent.payment_failed", *in)
		cp := clientView(*in, publishable)
		return http.StatusPaymentRequired, map[string]any{"error": map[string]any{"type": "card_error", "code": "card_declined",
			"decline_code": "generic_decline", "message": "Your card was declined.", "payment_intent": cp}}
	case pm == PaymentMethodDelayed:
		in.Status = "processing"
		s.deliverLocked("payment_intent.processing", *in)
	case strings.HasPrefix(pm, "pm_card_"):
		s.succeedLocked(in)
	default:
		return invalid(http.StatusBadRequest, "resource_missing", "No such PaymentMethod: '"+pm+"'")
	}
	return http.StatusOK, clientView(*in, publishable)
}

// succeedLocked captures in and delivers payment_intent.succeeded. The caller holds s.mu.
func (s *Server) succeedLocked(in *Intent) {
	in.Status, in.AmountReceived, in.NextAction = "succeeded", in.Amount, nil
	if in.LatestCharge == "" {
		in.LatestCharge = s.newID("ch")
	}
	s.deliverLocked("payment_intent.succeeded", *in)
}

// Authenticate ends the 3D Secure step of intent id (requires_action): passed → succeeded,
// otherwise back to requires_payment_method with payment_intent.payment_failed. ok=false
// when the intent is not requiring an action.
func (s *Server) Authenticate(id string, passed bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[id]
	if !found || in.Status != "requires_action" {
		return false
	}
	if passed {
		s.succeedLocked(in)
		return true
	}
	in.Status, in.NextAction = "requires_payment_method", nil
	in.LastPaymentError = map[string]any{"type": "card_error", "code": "payment_intent_authentication_failure",
		"message": "We are unable to authenticate your payment method."}
	s.deliverLocked("payment_intent.payment_failed", *in)
	return true
}

// SettleIntent ends the processing of intent id (a delayed method): succeeded →
// payment_intent.succeeded, otherwise requires_payment_method and
// payment_intent.payment_failed. ok=false when the intent is not processing.
func (s *Server) SettleIntent(id string, succeeded bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[id]
	if !found || in.Status != "processing" {
		return false
	}
	if succeeded {
		s.succeedLocked(in)
		return true
	}
	in.Status = "requires_payment_method"
	in.LastPaymentError = map[string]any{"type": "card_error", "code": "payment_method_provider_decline", "message": "The payment was declined."}
	s.deliverLocked("payment_intent.payment_failed", *in)
	return true
}

func (s *Server) cancelIntent(r *http.Request, _ bool) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[r.PathValue("id")]
	if !ok {
		return invalid(http.StatusNotFound, "resource_missing", "No such payment_intent: '"+r.PathValue("id")+"'")
	}
	switch s.cancel {
	case CancelUnknown:
		return apiError(http.StatusInternalServerError, "api_error", "", "An unknown error occurred", nil)
	case CancelPaysFirst:
		if in.Status != "canceled" && in.Status != "succeeded" {
			s.succeedLocked(in)
		}
	case CancelProcessing:
		if in.Status != "succeeded" && in.Status != "canceled" {
			in.Status = "processing"
		}
	}
	switch in.Status {
	case "succeeded", "processing", "canceled":
		cp := *in
		return apiError(http.StatusBadRequest, "invalid_request_error", "payment_intent_unexpected_state",
			"You cannot cancel this PaymentIntent because it has a status of "+in.Status+".", &cp)
	}
	in.Status, in.NextAction = "canceled", nil
	s.deliverLocked("payment_intent.canceled", *in)
	return http.StatusOK, *in
}

// refundable returns what is left to refund of in: failed and canceled refunds give their
// amount back. The caller holds s.mu.
func (s *Server) refundable(in *Intent) int64 {
	left := in.AmountReceived
	for _, f := range s.refunds {
		if f.PaymentIntent == in.ID && f.Status != "failed" && f.Status != "canceled" {
			left -= f.Amount
		}
	}
	return left
}

func (s *Server) refund(r *http.Request, _ bool) (int, any) {
	if err := r.ParseForm(); err != nil {
		return invalid(http.StatusBadRequest, "parameter_invalid", err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.intents[r.PostForm.Get("payment_intent")]
	if !ok {
		return invalid(http.StatusNotFound, "resource_missing", "No such payment_intent: '"+r.PostForm.Get("payment_intent")+"'")
	}
	if in.Status != "succeeded" {
		return invalid(http.StatusBadRequest, "charge_not_refundable", "This PaymentIntent does not have a successful charge to refund.")
	}
	left := s.refundable(in)
	amount := left
	if a := r.PostForm.Get("amount"); a != "" {
		amount, _ = strconv.ParseInt(a, 10, 64)
	}
	if left == 0 {
		return invalid(http.StatusBadRequest, "charge_already_refunded", "Charge "+in.LatestCharge+" has already been refunded.")
	}
	if amount <= 0 || amount > left {
		return invalid(http.StatusBadRequest, "amount_too_large",
			fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d)", amount, left))
	}
	f := &Refund{ID: s.newID("re"), Object: "refund", Amount: amount, Currency: in.Currency, Status: s.refundTo,
		PaymentIntent: in.ID, Charge: in.LatestCharge, Metadata: metadata(r.PostForm), Created: s.Now().Unix()}
	s.refunds[f.ID] = f
	s.refundList = append(s.refundList, f.ID)
	s.deliverLocked("refund.created", *f)
	return http.StatusOK, *f
}

func (s *Server) retrieveRefund(r *http.Request, _ bool) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.refunds[r.PathValue("id")]
	if !ok {
		return invalid(http.StatusNotFound, "resource_missing", "No such refund: '"+r.PathValue("id")+"'")
	}
	return http.StatusOK, *f
}

// listRefunds answers GET /v1/refunds: newest first, filtered by payment_intent, limit (10,
// at most 100) and starting_after, with has_more.
func (s *Server) listRefunds(r *http.Request, _ bool) (int, any) {
	q := r.URL.Query()
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return invalid(http.StatusBadRequest, "parameter_invalid_integer", "limit must be between 1 and 100")
		}
		limit = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []Refund
	for i := len(s.refundList) - 1; i >= 0; i-- {
		if f := s.refunds[s.refundList[i]]; q.Get("payment_intent") == "" || f.PaymentIntent == q.Get("payment_intent") {
			all = append(all, *f)
		}
	}
	if after := q.Get("starting_after"); after != "" {
		i := slices.IndexFunc(all, func(f Refund) bool { return f.ID == after })
		if i < 0 {
			return invalid(http.StatusBadRequest, "resource_missing", "No such refund: '"+after+"'")
		}
		all = all[i+1:]
	}
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	if all == nil {
		all = []Refund{}
	}
	return http.StatusOK, map[string]any{"object": "list", "url": "/v1/refunds", "data": all, "has_more": more}
}

// SettleRefund moves refund id (pending or requires_action) to status: succeeded, failed
// (failure_reason reason, "declined" if empty) or canceled, and delivers refund.updated and
// charge.refund.updated (and refund.failed for a failure), as Stripe does. It returns those
// events; ok=false when there is no such refund or it is final already.
func (s *Server) SettleRefund(id, status, reason string) (events [][]byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, found := s.refunds[id]
	if !found || (f.Status != "pending" && f.Status != "requires_action") {
		return nil, false
	}
	f.Status = status
	if status == "failed" {
		f.FailureReason = or(reason, "declined")
	}
	types := []string{"refund.updated", "charge.refund.updated"}
	if status == "failed" {
		types = append(types, "refund.failed")
	}
	for _, t := range types {
		events = append(events, s.deliverLocked(t, *f))
	}
	return events, true
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// The imitation's own controls over HTTP, for `orderly imitate stripe`.

func (s *Server) authenticateHTTP(r *http.Request, _ bool) (int, any) {
	_ = r.ParseForm()
	if !s.Authenticate(r.PathValue("id"), r.Form.Get("outcome") != "failed") {
		return invalid(http.StatusBadRequest, "payment_intent_unexpected_state", "the intent does not require an action")
	}
	return s.retrieve(r, false)
}

func (s *Server) settleIntentHTTP(r *http.Request, _ bool) (int, any) {
	_ = r.ParseForm()
	if !s.SettleIntent(r.PathValue("id"), r.Form.Get("outcome") != "failed") {
		return invalid(http.StatusBadRequest, "payment_intent_unexpected_state", "the intent is not processing")
	}
	return s.retrieve(r, false)
}

func (s *Server) settleRefundHTTP(r *http.Request, _ bool) (int, any) {
	_ = r.ParseForm()
	status := or(r.Form.Get("status"), "succeeded")
	if status != "succeeded" && status != "failed" && status != "canceled" {
		return invalid(http.StatusBadRequest, "parameter_invalid", "status must be succeeded, failed or canceled")
	}
	if _, ok := s.SettleRefund(r.PathValue("id"), status, r.Form.Get("failure_reason")); !ok {
		return invalid(http.StatusBadRequest, "refund_unexpected_state", "no such refund, or it is final")
	}
	return s.retrieveRefund(r, false)
}

func (s *Server) refundStatusHTTP(r *http.Request, _ bool) (int, any) {
	_ = r.ParseForm()
	status := r.Form.Get("status")
	if status != "succeeded" && status != "pending" && status != "requires_action" {
		return invalid(http.StatusBadRequest, "parameter_invalid", "status must be succeeded, pending or requires_action")
	}
	s.SetRefundStatus(status)
	return http.StatusOK, map[string]string{"refund_status": status}
}

// Pay captures the intent of orderly payment paymentID (the buyer paid) and returns the
// payment_intent.succeeded event, not delivered. ok=false when there is no such intent or
// it was cancelled.
func (s *Server) Pay(paymentID string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, found := s.intents[s.byPayment[paymentID]]
	if !found || in.Status == "canceled" {
		return nil, false
	}
	in.Status, in.AmountReceived, in.NextAction = "succeeded", in.Amount, nil
	if in.LatestCharge == "" {
		in.LatestCharge = s.newID("ch")
	}
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
	if in.LatestCharge == "" {
		in.LatestCharge = s.newID("ch")
	}
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
	for _, id := range s.refundList {
		if f := s.refunds[id]; f.PaymentIntent == s.byPayment[paymentID] {
			out = append(out, s.event("refund.updated", *f))
		}
	}
	return out
}

// FailRefund fails the refund whose metadata[key] is value (orderly's refund id under
// "refund_id"), as Stripe does when the bank returns a refund after it succeeded: status
// failed with failure_reason, and returns its refund.updated event, not delivered.
// ok=false when there is no such refund.
func (s *Server) FailRefund(key, value, reason string) (event []byte, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.refundList {
		if f := s.refunds[id]; f.Metadata[key] == value {
			f.Status, f.FailureReason = "failed", reason
			return s.event("refund.updated", *f), true
		}
	}
	return nil, false
}

// event returns an event of type typ about obj, as Stripe serialises it. The caller holds
// s.mu.
func (s *Server) event(typ string, obj any) []byte {
	b, _ := json.Marshal(map[string]any{"id": s.newID("evt"), "object": "event", "api_version": s.EventVersion,
		"type": typ, "created": s.Now().Unix(), "livemode": false, "pending_webhooks": 1,
		"data": map[string]any{"object": obj}})
	return b
}

// deliverLocked makes the event typ about obj and, when a webhook URL is set, delivers it
// in the background: retried on failure with backoff (Stripe retries for 3 days; the
// imitation 6 times from 100 ms) until Close. The caller holds s.mu.
func (s *Server) deliverLocked(typ string, obj any) []byte {
	ev := s.event(typ, obj)
	if s.webhook == "" {
		return ev
	}
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(ev, &id)
	s.deliverWG.Add(1)
	go func() {
		defer s.deliverWG.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		wait := 100 * time.Millisecond
		for attempt := 0; ; attempt++ {
			status, _ := s.Send(ctx, ev)
			s.mu.Lock()
			s.deliveries = append(s.deliveries, Delivery{Type: typ, EventID: id.ID, Status: status})
			s.mu.Unlock()
			if status/100 == 2 || attempt == 5 {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
				wait *= 2
			}
		}
	}()
	return ev
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
func (s *Server) Deliver(ctx context.Context, events [][]byte, copies int, shuffle bool, rnd *mrand.Rand) ([]int, error) {
	var all [][]byte
	for _, e := range events {
		for range max(copies, 1) {
			all = append(all, e)
		}
	}
	if shuffle {
		if rnd == nil {
			rnd = mrand.New(mrand.NewPCG(1, 2)) //nolint:gosec // G404: a reproducible delivery order, not a secret
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
