package httpapi

import (
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
