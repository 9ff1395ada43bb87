package httpapi

import (
	"cmp"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
)

// webhookRoutes registers the merchant webhook subscriptions under /v1/admin (behind the
// admin token): POST and GET /webhooks, DELETE /webhooks/{id}.
func (s *Server) webhookRoutes(r chi.Router) {
	r.Post("/webhooks", s.createWebhook)
	r.Get("/webhooks", s.listWebhooks)
	r.Delete("/webhooks/{id}", s.deleteWebhook)
}

// webhookRequest is the body of POST /v1/admin/webhooks.
type webhookRequest struct {
	URL    string   `json:"url"`
	Topics []string `json:"topics"`
	Secret string   `json:"secret,omitempty"`
}

// webhookResponse is a subscription; Secret is set only in the answer that creates it.
type webhookResponse struct {
	ID        string   `json:"id"`
	URL       string   `json:"url"`
	Topics    []string `json:"topics"`
	Secret    string   `json:"secret,omitempty"`
	CreatedAt string   `json:"created_at"`
}

func newWebhookResponse(w *orderly.Webhook) *webhookResponse {
	return &webhookResponse{ID: w.ID, URL: w.URL, Topics: w.Topics, CreatedAt: w.CreatedAt.UTC().Format(time.RFC3339Nano)}
}

// webhooksOff answers 404 when no webhook service is configured; it reports whether it did.
func (s *Server) webhooksOff(w http.ResponseWriter, r *http.Request) bool {
	if s.webhooks == nil {
		s.writeProblem(w, r, CodeRouteNotFound, "webhooks are not served by this server")
		return true
	}
	return false
}

// createWebhook handles POST /v1/admin/webhooks {"url","topics":[…],"secret"?}: 201 with the
// subscription and its secret (generated when absent; shown only here). 422 invalid-input
// for a URL that is not http(s) with a host, no topic, or a secret under 16 bytes.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	if s.webhooksOff(w, r) {
		return
	}
	var req webhookRequest
	if !s.decode(w, r, &req, bodyRequired) {
		return
	}
	sub, secret, err := s.webhooks.Subscribe(r.Context(), req.URL, req.Topics, req.Secret)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := newWebhookResponse(sub)
	resp.Secret = secret
	s.writeJSON(w, r, http.StatusCreated, resp)
}

// listWebhooks handles GET /v1/admin/webhooks: {"webhooks":[…]} by id, without secrets.
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	if s.webhooksOff(w, r) {
		return
	}
	subs, err := s.webhooks.Webhooks(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]*webhookResponse, len(subs))
	for i, sub := range subs {
		out[i] = newWebhookResponse(sub)
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"webhooks": out})
}

// deleteWebhook handles DELETE /v1/admin/webhooks/{id}: 204; 404 not-found when there is
// none. Its deliveries still pending are dropped.
func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if s.webhooksOff(w, r) {
		return
	}
	if err := s.webhooks.Unsubscribe(r.Context(), pathParam(r, "id")); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// eventResponse is one event of GET /v1/events: the body a webhook delivery POSTs
// (webhook.Envelope) and the time it was written.
type eventResponse struct {
	ID        string          `json:"id"`
	Topic     string          `json:"topic"`
	Key       string          `json:"key"`
	Sequence  int64           `json:"sequence"`
	Data      json.RawMessage `json:"data"`
	CreatedAt Time            `json:"created_at"`
}

// eventsPage is the body of GET /v1/events.
type eventsPage struct {
	Events []*eventResponse `json:"events"`
	// NextAfter is the after of the next page: pass it back, now or later, to go on from
	// here (never absent: on an empty page it is the after that was given).
	NextAfter string `json:"next_after"`
}

// listEvents handles GET /v1/events?after=&topic=&order_id=&limit=: the events committed
// after the position after, oldest first, with the bodies and sequences their webhook
// deliveries and NATS messages have; limit per page (default 100, at most 1000). A
// consumer whose endpoint was down catches up from the next_after it kept. 422 for an
// after no page gave, an unknown topic, a bad order id or limit; 404 route-not-found
// when the server has no webhook service.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	if s.webhooksOff(w, r) {
		return
	}
	q := r.URL.Query()
	limit, err := queryLimit(q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page, err := s.webhooks.Events(r.Context(), &orderly.EventsQuery{After: q.Get("after"), Topic: q.Get("topic"),
		OrderID: q.Get("order_id"), Limit: cmp.Or(limit, 100)})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := &eventsPage{Events: make([]*eventResponse, len(page.Events)), NextAfter: page.NextAfter}
	for i, e := range page.Events {
		out.Events[i] = &eventResponse{ID: e.ID, Topic: e.Topic, Key: e.Key, Sequence: e.Sequence, Data: e.Data, CreatedAt: Time(e.CreatedAt)}
	}
	s.writeJSON(w, r, http.StatusOK, out)
}
