package httpapi

import (
	"context"
	"net/http"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
)

// NotificationHandler applies verified channel notifications (payment.Service implements
// it; see payment.Service.HandleNotification).
type NotificationHandler interface {
	// HandleNotification applies n at most once per (n.Channel, n.EventID).
	HandleNotification(ctx context.Context, n *channel.Notification) (*orderly.CallbackResult, error)
}

// channelWebhook handles POST /v1/channels/{channel}/webhook, a payment provider's
// notification. The named channel's adapter verifies the raw body (at most MaxBodyBytes,
// else 413) with the provider's own signature scheme, decodes it, and the notification is
// applied through the payment service (duplicates by event id change nothing); then the
// adapter answers in the provider's format (channel.Adapter.Ack): handled → the
// provider's success answer, refused or failed → its failure answer. A channel that is
// not configured is answered 404 problem+json.
func (s *Server) channelWebhook(w http.ResponseWriter, r *http.Request) {
	name := pathParam(r, "channel")
	a, ok := s.channels[name]
	if !ok || s.notifications == nil {
		s.writeError(w, r, orderly.Errorf(orderly.ENOTFOUND, "no payment channel %q is configured", name))
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	n, err := a.Verify(r.Header, body, s.now())
	if err != nil {
		s.logger.WarnContext(r.Context(), "channel notification refused", "channel", name,
			"trace_id", TraceIDFromContext(r.Context()), "remote_addr", r.RemoteAddr, "reason", orderly.ErrorMessage(err))
		a.Ack(w, err)
		return
	}
	if _, err := s.notifications.HandleNotification(r.Context(), n); err != nil {
		if orderly.ErrorCode(err) == orderly.EINTERNAL {
			s.logger.ErrorContext(r.Context(), "channel notification failed", "channel", name, "event_id", n.EventID,
				"payment_id", n.PaymentID, "error", err)
		}
		a.Ack(w, err)
		return
	}
	a.Ack(w, nil)
}

// channelsResponse is the body of GET /v1/admin/channels.
type channelsResponse struct {
	Channels []channel.Stat `json:"channels"`
	// Deviation is the largest success rate minus the smallest among the routes in
	// rotation that have outcomes (channel.Deviations).
	Deviation float64 `json:"deviation"`
	// VariantDeviation is, per channel with two or more variants in rotation that have
	// outcomes, the largest success rate of its variants minus the smallest: how far the
	// versions of a gray release differ.
	VariantDeviation map[string]float64 `json:"variant_deviation"`
}

// adminChannels handles GET /v1/admin/channels: each route's channel and variant, weight,
// whether it is in rotation, its outcomes and success rate over the router's window, the
// deviation between all routes and between the variants of each channel. Without routes (Config.ChannelStats nil): {"channels": []}.
func (s *Server) adminChannels(w http.ResponseWriter, r *http.Request) {
	resp := &channelsResponse{Channels: []channel.Stat{}}
	if s.channelStats != nil {
		resp.Channels = s.channelStats()
	}
	resp.Deviation, resp.VariantDeviation = channel.Deviations(resp.Channels)
	s.writeJSON(w, r, http.StatusOK, resp)
}
