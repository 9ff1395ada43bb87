// Package webhook delivers outbox events to merchant endpoints (docs/concepts/outbox-and-events.md).
//
// Design: a fan-out, not a delivery table. When the relay delivers an event (any topic
// without a local handler: order.closed, order.paid, …), FanOut runs in the same
// transaction that marks it delivered and writes one webhook.deliver outbox message per
// subscriber of its topic, keyed "webhook:<subscriber id>:<event key>" and carrying the
// event's trace context. Those are ordinary outbox messages: the relay delivers them with
// Handler's Call (a signed HTTP POST), retries them with backoff, moves them to dead after
// its max attempts, and an admin re-drives them like any message. Keyed per subscriber and
// order, an order's events reach each subscriber in order (the relay never delivers a
// key's message while an earlier one waits), a slow or failing subscriber holds back only
// its own deliveries, and every delivery carries the event's per-order sequence so that a
// subscriber drops a stale one (a re-driven dead letter). The relay stays generic.
package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Headers of a delivery besides Orderly-Signature (payment.SignatureHeader) and the W3C
// trace context (traceparent).
const (
	HeaderEventID  = "Orderly-Event-Id" // the event's message id: the subscriber's de-duplication key
	HeaderTopic    = "Orderly-Topic"    // e.g. "order.closed"
	HeaderSequence = "Orderly-Sequence" // the event's per-order sequence (decimal)
)

// Defaults of Config and of the relay's webhook lane (Lane).
const (
	DefaultTimeout     = 5 * time.Second
	DefaultConcurrency = 8
)

// Config configures a Service. Zero values mean the documented defaults.
type Config struct {
	Store store.Store // required
	// Client sends deliveries; by default a client whose transport propagates the trace
	// context (telemetry.Transport) and follows no redirect.
	Client *http.Client
	// Timeout bounds one delivery (connect, send, read the answer); a slower subscriber's
	// attempt fails and is retried with the outbox's backoff; DefaultTimeout (5 s).
	Timeout time.Duration
	// Topics are the event topics a subscription may name (orderly.EventTopics of the
	// engine's flows); nil means orderly.EventTopics(orderly.DefaultFlows()).
	Topics []string
	// EventsDelay is how old an event must be for Events to list it: at least the longest
	// a transaction that writes events may take to commit after writing them, so that a
	// page never passes over an event with a smaller position committed after it. 0 fits
	// SQLite alone, whose one writer commits in position order.
	EventsDelay time.Duration
	// Now is the clock of the signature's timestamp; time.Now.
	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *telemetry.Metrics
}

// Service manages subscriptions and delivers events; it implements
// orderly.WebhookService.
type Service struct {
	cfg Config
}

var _ orderly.WebhookService = (*Service)(nil)

// New returns a Service; an error when cfg has no Store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("webhook: Config.Store is required")
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("webhook: Config.Timeout must not be negative")
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	if cfg.Topics == nil {
		cfg.Topics = orderly.EventTopics(orderly.DefaultFlows())
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{
			Transport: telemetry.Transport(nil),
			// A redirect could point a signed delivery anywhere: the subscriber registers
			// the URL it wants.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	return &Service{cfg: cfg}, nil
}

// Limits of a subscription.
const (
	minSecret, maxSecret = 16, 256
	maxTopic             = 128
	maxURL               = 2048
)

// Subscribe implements orderly.WebhookService.
//
// SSRF note: only http and https URLs with a host and without credentials are accepted;
// the endpoint is called from the server's network, so an operator who can register one
// can make the server POST to internal addresses. Registration is an admin action (bearer
// token) for that reason.
func (s *Service) Subscribe(ctx context.Context, rawURL string, topics []string, secret string) (*orderly.Webhook, string, error) {
	if err := validURL(rawURL); err != nil {
		return nil, "", err
	}
	if err := s.validTopics(topics); err != nil {
		return nil, "", err
	}
	if secret == "" {
		var b [32]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		secret = "whsec_" + hex.EncodeToString(b[:])
	} else if len(secret) < minSecret || len(secret) > maxSecret {
		return nil, "", orderly.Errorf(orderly.EINVALID, "secret: must be %d to %d bytes (or absent, to have one generated)", minSecret, maxSecret)
	}
	w := &orderly.Webhook{ID: "whk_" + uuid.NewString(), URL: rawURL, Topics: topics, Secret: secret}
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		w.CreatedAt = now
		return tx.WebhookInsert(ctx, w)
	})
	if err != nil {
		return nil, "", fmt.Errorf("subscribe webhook %s: %w", rawURL, err)
	}
	return w, secret, nil
}

// validTopics accepts a non-empty list of distinct topics, each an event topic of
// Config.Topics, "*" (every event) or "<prefix>.*" naming at least one of them (every
// event under "<prefix>.", e.g. "order.*").
func (s *Service) validTopics(topics []string) error {
	if len(topics) == 0 {
		return orderly.Errorf(orderly.EINVALID, "topics: at least one topic is required (or %q for all)", orderly.WebhookAllTopics)
	}
	seen := make(map[string]bool, len(topics))
	for i, t := range topics {
		if seen[t] {
			return orderly.Errorf(orderly.EINVALID, "topics[%d]: %q is listed twice", i, t)
		}
		seen[t] = true
		if len(t) > maxTopic || !s.knownTopic(t) {
			return orderly.Errorf(orderly.EINVALID, "topics[%d]: %.128q is not an event topic: one of %s, %q, or \"<prefix>.*\" (e.g. \"order.*\")",
				i, t, strings.Join(s.cfg.Topics, ", "), orderly.WebhookAllTopics)
		}
	}
	return nil
}

// Events implements orderly.WebhookService.
func (s *Service) Events(ctx context.Context, q *orderly.EventsQuery) (*orderly.EventsPage, error) {
	var after int64
	if q.After != "" {
		var err error
		// Only a position a page gave: no sign, no leading zero, not 0 (the start is no after).
		if after, err = strconv.ParseInt(q.After, 10, 64); err != nil || after < 1 || strconv.FormatInt(after, 10) != q.After {
			return nil, orderly.Errorf(orderly.EINVALID, "after: must be the next_after of a previous page")
		}
	}
	switch {
	case q.Topic != "" && !slices.Contains(s.cfg.Topics, q.Topic):
		return nil, orderly.Errorf(orderly.EINVALID, "topic: %.128q is not an event topic: one of %s", q.Topic, strings.Join(s.cfg.Topics, ", "))
	case q.OrderID != "" && !order.ValidID(q.OrderID):
		return nil, orderly.Errorf(orderly.EINVALID, "order_id: must be an order id")
	case q.Limit < 1 || q.Limit > 1000:
		return nil, orderly.Errorf(orderly.EINVALID, "limit: must be 1–1000")
	}
	var msgs []*orderly.Message
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		msgs, err = tx.OutboxEvents(ctx, &store.OutboxEventsParams{AfterID: after, Before: now.Add(-s.cfg.EventsDelay),
			Topic: q.Topic, Key: q.OrderID, Limit: q.Limit})
		if err != nil || len(msgs) > 0 || after == 0 {
			return err
		}
		// An empty page: a position beyond every message was never given here (a cursor kept
		// across a restore from a backup), and reading from it would skip the events written
		// up to it. Only an empty page can mean that, so only it pays for the check.
		last, err := tx.OutboxLastID(ctx)
		if err != nil {
			return err
		} else if last > 0 && after > last {
			return orderly.Errorf(orderly.EINVALID, "after: %d is beyond the newest position of this database (%d): "+
				"it was not given here (restored from a backup?); catch up from the start or from a position it gave", after, last)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	page := &orderly.EventsPage{Events: make([]*orderly.PublishedEvent, len(msgs)), NextAfter: q.After}
	for i, m := range msgs {
		page.Events[i] = &orderly.PublishedEvent{ID: m.MessageID, Topic: m.Topic, Key: m.Key, Sequence: m.Sequence,
			Data: m.Payload, CreatedAt: m.CreatedAt}
		page.NextAfter = strconv.FormatInt(m.ID, 10)
	}
	return page, nil
}

// knownTopic reports whether a subscription may name t: "*", an event topic, or a
// "<prefix>.*" wildcard that matches at least one event topic.
func (s *Service) knownTopic(t string) bool {
	if t == orderly.WebhookAllTopics || slices.Contains(s.cfg.Topics, t) {
		return true
	}
	prefix, ok := strings.CutSuffix(t, "*")
	if !ok || !strings.HasSuffix(prefix, ".") || len(prefix) < 2 {
		return false
	}
	return slices.ContainsFunc(s.cfg.Topics, func(known string) bool { return strings.HasPrefix(known, prefix) })
}

// validURL accepts an absolute http or https URL with a host name or IP address, a port
// (when given) from 1 to 65535, and without user info.
func validURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || len(raw) > maxURL:
		return orderly.Errorf(orderly.EINVALID, "url: not a URL of at most %d bytes", maxURL)
	case u.Scheme != "http" && u.Scheme != "https":
		return orderly.Errorf(orderly.EINVALID, "url: scheme %q refused: only http and https", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return orderly.Errorf(orderly.EINVALID, "url: a host is required")
	case u.User != nil:
		return orderly.Errorf(orderly.EINVALID, "url: credentials in the URL are refused (the signature authenticates deliveries)")
	case !validHost(u.Hostname()):
		return orderly.Errorf(orderly.EINVALID, "url: host %q is neither an IP address nor a DNS name", u.Hostname())
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return orderly.Errorf(orderly.EINVALID, "url: port %q is not a port number (1 to 65535)", p)
		}
	}
	return nil
}

// hostLabel is one label of a DNS name (RFC 1123: letters, digits, hyphens inside; we
// also let underscores through, as resolvers do).
var hostLabel = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$`)

// validHost accepts an IP address or a DNS name of at most 253 bytes.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if !hostLabel.MatchString(label) {
			return false
		}
	}
	return true
}

// Webhooks implements orderly.WebhookService.
func (s *Service) Webhooks(ctx context.Context) ([]*orderly.Webhook, error) {
	var ws []*orderly.Webhook
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		ws, err = tx.WebhookList(ctx)
		return err
	})
	for _, w := range ws {
		w.Secret = ""
	}
	return ws, err
}

// Unsubscribe implements orderly.WebhookService.
func (s *Service) Unsubscribe(ctx context.Context, id string) error {
	return s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		ok, err := tx.WebhookDelete(ctx, id)
		if err != nil {
			return err
		} else if !ok {
			return orderly.Errorf(orderly.ENOTFOUND, "webhook %s not found", id)
		}
		return nil
	})
}

// FanOut is the outbox Apply of event topics: in the transaction that marks msgs
// delivered, it writes one webhook.deliver message per (event, subscriber of its topic),
// in msgs' order, carrying the event's trace context. No subscriber, nothing written.
func (s *Service) FanOut(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
	subs, err := tx.WebhookList(ctx)
	if err != nil || len(subs) == 0 {
		return err
	}
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	var out []*store.OutboxInsertParams
	for _, m := range msgs {
		for _, w := range subs {
			if !w.Wants(m.Topic) {
				continue
			}
			p, err := outbox.NewMessage(orderly.TopicWebhookDeliver, "webhook:"+w.ID+":"+m.Key, &orderly.WebhookDelivery{
				SubscriberID: w.ID, EventID: m.MessageID, Topic: m.Topic, Key: m.Key, Sequence: m.Sequence, Payload: m.Payload,
			}, now)
			if err != nil {
				return err
			}
			p.TraceParent, p.Group = m.TraceParent, w.ID
			out = append(out, p)
		}
	}
	return tx.OutboxInsert(ctx, out)
}

// Envelope is the JSON body POSTed to a subscriber.
type Envelope struct {
	ID       string          `json:"id"`       // the event's message id, unique across databases
	Topic    string          `json:"topic"`    // e.g. "order.closed"
	Key      string          `json:"key"`      // the order id for events about an order
	Sequence int64           `json:"sequence"` // the event's per-order sequence; drop one ≤ the last applied
	Data     json.RawMessage `json:"data"`     // the event's payload (orderly.OrderEvent, …)
}

// Handler returns the outbox handler of webhook.deliver: Call POSTs the Envelope to the
// subscriber with Content-Type application/json, Orderly-Signature
// (payment.Sign(secret, now, body): "t=<unix s>,v1=<hex HMAC-SHA256>"), Orderly-Event-Id,
// Orderly-Topic, Orderly-Sequence and traceparent. A 2xx answer delivers it; any other
// answer or a transport error is retried by the relay. A subscriber deleted meanwhile
// drops the delivery (counted as dropped).
func (s *Service) Handler() outbox.Handler {
	return outbox.Handler{Call: s.deliver}
}

// Lane is the relay's lane of webhook deliveries (outbox.Config.Lanes): webhook.deliver
// messages are claimed by a loop of their own and delivered concurrency keys at a time (of
// different subscribers or orders; one key's deliveries stay in order), each bounded by
// Config.Timeout and committed as soon as it ends; a free slot is filled at once, without
// waiting for the slowest delivery of the last batch (outbox.Lane.CommitPerKey). A subscriber that answers slowly or never costs its own
// deliveries a timeout and a retry; it never delays the order events, releases and gateway
// refunds of the main lane (docs/concepts/outbox-and-events.md). Deliveries are grouped by subscriber and
// one subscriber has at most half the lane's slots (at least one): its backlog, a re-drive
// of its dead deliveries or its slow answers leave the other half to the other subscribers'
// fresh events (outbox.Lane.GroupLimit).
func (s *Service) Lane(concurrency int) outbox.Lane {
	concurrency = cmp.Or(concurrency, DefaultConcurrency)
	return outbox.Lane{Name: "webhook", Topics: []string{orderly.TopicWebhookDeliver},
		Concurrency: concurrency, CallTimeout: s.cfg.Timeout + time.Second, BatchSize: concurrency, CommitPerKey: true,
		GroupLimit: max(1, concurrency/2),
		FedByRelay: true} // written only by FanOut, in the main lane's delivery transactions
}

func (s *Service) deliver(ctx context.Context, m *orderly.Message) error {
	var d orderly.WebhookDelivery
	if err := outbox.Decode(m, &d); err != nil {
		return err
	}
	var w *orderly.Webhook
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		w, err = tx.WebhookGet(ctx, d.SubscriberID)
		return err
	})
	if orderly.ErrorCode(err) == orderly.ENOTFOUND {
		s.cfg.Metrics.WebhookDeliveries.WithLabelValues("dropped").Inc()
		s.cfg.Logger.Info("webhook delivery dropped: the subscriber was deleted", "subscriber_id", d.SubscriberID, "event_id", d.EventID)
		return nil
	} else if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	body, err := json.Marshal(&Envelope{ID: d.EventID, Topic: d.Topic, Key: d.Key, Sequence: d.Sequence, Data: d.Payload})
	if err != nil {
		return outbox.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return outbox.Permanent(fmt.Errorf("webhook %s: %w", w.ID, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "orderly-webhooks")
	req.Header.Set(payment.SignatureHeader, payment.Sign([]byte(w.Secret), s.cfg.Now(), body))
	req.Header.Set(HeaderEventID, d.EventID)
	req.Header.Set(HeaderTopic, d.Topic)
	req.Header.Set(HeaderSequence, strconv.FormatInt(d.Sequence, 10))
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		s.cfg.Metrics.WebhookDeliveries.WithLabelValues("failed").Inc()
		return fmt.Errorf("webhook %s: POST %s: %w", w.ID, w.URL, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		s.cfg.Metrics.WebhookDeliveries.WithLabelValues("failed").Inc()
		return fmt.Errorf("webhook %s: POST %s answered %s", w.ID, w.URL, resp.Status)
	}
	s.cfg.Metrics.WebhookDeliveries.WithLabelValues("delivered").Inc()
	return nil
}
