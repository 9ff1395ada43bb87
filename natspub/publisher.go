package natspub

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/telemetry"
)

// Headers set on every published message besides jetstream.MsgIDHeader ("Nats-Msg-Id").
const (
	// HeaderTopic carries the outbox topic, e.g. "order.closed".
	HeaderTopic = "Orderly-Topic"
	// HeaderKey carries the outbox key: the order id for every event about an order.
	HeaderKey = "Orderly-Key"
	// HeaderSequence carries an event's per-order sequence (decimal), the same as its
	// payload's "sequence"; absent on messages that are not events.
	HeaderSequence = "Orderly-Sequence"
)

// Config configures New. Zero values mean the documented defaults.
type Config struct {
	// URL is the NATS server, e.g. "nats://127.0.0.1:4222"; a comma-separated list names
	// several servers of one cluster. Required.
	URL string
	// Stream is the JetStream stream that stores the events; "ORDERLY". New creates it, or
	// adds the subjects and sets the duplicate window of an existing stream of that name,
	// keeping its other settings (retention, limits, replicas) as an operator set them.
	Stream string
	// SubjectPrefix is prepended to the topic: topic order.closed is published to
	// "<SubjectPrefix>.order.closed", and the stream listens on "<SubjectPrefix>.>";
	// "orderly". It may have several tokens ("shop.orderly") but no wildcards.
	SubjectPrefix string
	// Duplicates is the stream's duplicate window: a message whose Nats-Msg-Id the stream
	// stored less than this long ago is acknowledged as a duplicate and not stored again;
	// 2 min. It should exceed the time between a publish and the relay's retry of it (the
	// relay's Lease, 30 s, after a crash; its backoff after a failed publish).
	Duplicates time.Duration
	// PublishTimeout bounds one publish, from sending to the stream's ack; 5 s. Keep it
	// below the relay's CallTimeout (10 s).
	PublishTimeout time.Duration
	// MsgIDPrefix is prepended to the message's MessageID (a UUID, unique across databases)
	// to form the Nats-Msg-Id; optional, e.g. to tell deployments apart in the stream.
	MsgIDPrefix string
	// Logger logs connection losses and reconnects; slog.Default().
	Logger *slog.Logger
}

// withDefaults returns cfg with defaults applied, or an error naming the first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return cfg, errors.New("natspub: Config.URL is required")
	}
	if cfg.Duplicates < 0 || cfg.PublishTimeout < 0 {
		return cfg, errors.New("natspub: Config durations must not be negative")
	}
	cfg.Stream = cmp.Or(cfg.Stream, "ORDERLY")
	cfg.SubjectPrefix = cmp.Or(cfg.SubjectPrefix, "orderly")
	cfg.Duplicates = cmp.Or(cfg.Duplicates, 2*time.Minute)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, 5*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Stream == "" || strings.ContainsAny(cfg.Stream, ".*> \t\r\n/\\") {
		return cfg, fmt.Errorf("natspub: Config.Stream %q: a stream name has no '.', '*', '>', '/', '\\' or spaces", cfg.Stream)
	}
	if !validSubject(cfg.SubjectPrefix) {
		return cfg, fmt.Errorf("natspub: Config.SubjectPrefix %q is not a subject without wildcards", cfg.SubjectPrefix)
	}
	if strings.ContainsAny(cfg.MsgIDPrefix, "\r\n") {
		return cfg, errors.New("natspub: Config.MsgIDPrefix must not contain line breaks")
	}
	return cfg, nil
}

// validSubject reports whether s is a NATS subject for publishing: dot-separated non-empty
// tokens without wildcards ('*', '>') or whitespace.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, "*> \t\r\n") {
		return false
	}
	return !slices.Contains(strings.Split(s, "."), "")
}

// Publisher publishes outbox messages to a JetStream stream. It is safe for concurrent use.
type Publisher struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream // cfg.Stream, to read back the stored copy of a duplicate
	closed chan struct{}    // closed by the connection's closed handler
}

// New connects to cfg.URL and creates or updates cfg.Stream with the subjects
// "<SubjectPrefix>.>" and the duplicate window cfg.Duplicates. The connection reconnects
// without limit after it is established; the first connect is not retried: New fails when
// no server answers (each dial is bounded by the client's 2 s timeout). Stream setup is
// bounded by ctx, or by 5 s when ctx has no deadline. Errors: an invalid Config, no server,
// JetStream not enabled, a stream setup the server refuses (overlapping subjects, say).
func New(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, closed: make(chan struct{})}
	log := cfg.Logger
	p.nc, err = nats.Connect(cfg.URL,
		nats.Name("orderly outbox publisher"),
		nats.MaxReconnects(-1),
		// No in-memory buffer while reconnecting: a publish fails at once and the outbox
		// retries it, instead of the client sending it late on reconnect.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected; reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("nats error", "error", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(p.closed) }),
	)
	if err != nil {
		return nil, fmt.Errorf("natspub: connect %s: %w", redact(cfg.URL), err)
	}
	p.js, err = jetstream.New(p.nc)
	if err == nil {
		err = p.ensureStream(ctx)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// ensureStream creates the stream, or adds the subjects and sets the duplicate window of
// an existing one without touching its other settings.
func (p *Publisher) ensureStream(ctx context.Context) error {
	name, subjects := p.cfg.Stream, p.cfg.SubjectPrefix+".>"
	s, err := p.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = p.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        name,
			Description: "orderly outbox events",
			Subjects:    []string{subjects},
			Storage:     jetstream.FileStorage,
			Duplicates:  p.cfg.Duplicates,
		})
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if err != nil {
				return fmt.Errorf("natspub: create stream %s: %w", name, err)
			}
			p.stream = s
			return nil
		}
		// Another instance created it meanwhile, maybe with other settings: update it.
		s, err = p.js.Stream(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("natspub: stream %s: %w", name, err)
	}
	p.stream = s
	sc := s.CachedInfo().Config
	if slices.Contains(sc.Subjects, subjects) && sc.Duplicates == p.cfg.Duplicates {
		return nil
	}
	if !slices.Contains(sc.Subjects, subjects) {
		sc.Subjects = append(sc.Subjects, subjects)
	}
	sc.Duplicates = p.cfg.Duplicates
	if _, err := p.js.UpdateStream(ctx, sc); err != nil {
		return fmt.Errorf("natspub: update stream %s: %w", name, err)
	}
	return nil
}

// Close closes the connection, failing publishes in flight, and waits (at most 5 s) until
// the client has shut down. Safe to call twice.
func (p *Publisher) Close() {
	p.nc.Close()
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.closed:
	case <-t.C:
	}
}

// Connected reports whether the connection to NATS is up (for a readiness check). While
// it is false, publishes fail and the relay retries them.
func (p *Publisher) Connected() bool { return p.nc.IsConnected() }

// Stream returns the name of the stream the publisher writes to.
func (p *Publisher) Stream() string { return p.cfg.Stream }

// Subject returns the subject of a topic: "<SubjectPrefix>.<topic>".
func (p *Publisher) Subject(topic string) string { return p.cfg.SubjectPrefix + "." + topic }

// MsgID returns the JetStream message id (Nats-Msg-Id) of an outbox message:
// MsgIDPrefix + m.MessageID, a UUID minted with the row, so that no other database's
// messages share it.
func (p *Publisher) MsgID(m *orderly.Message) string { return p.cfg.MsgIDPrefix + m.MessageID }

// Publish publishes m.Payload to Subject(m.Topic) with the headers Nats-Msg-Id (MsgID(m)),
// Orderly-Topic, Orderly-Key and, for an event, Orderly-Sequence, and waits for the
// stream's ack, at most PublishTimeout.
//
// An ack with Duplicate set means the stream already held a message with that id, so it
// did not store this one. That is a delivery only when the stored message is this one (an
// earlier attempt that was stored but whose ack was lost, or whose delivered mark was
// lost in a crash): Publish reads the stored copy back and compares topic, key and
// payload. When they differ, the id was taken by another publisher and Publish returns
// an error (transient: the relay retries, and once the duplicate window has passed, the
// message is stored). When the copy cannot be read (removed by the stream's limits, or no
// permission), the duplicate counts as delivered only if the message was attempted before
// (m.Attempts > 1).
//
// Errors: a message without MessageID, a topic that is not a valid subject token sequence,
// a key with line breaks or a payload over the server's limit are permanent
// (outbox.Permanent: retrying cannot fix them); anything else (no connection, timeout, no
// stream, an unexpected duplicate) is transient.
func (p *Publisher) Publish(ctx context.Context, m *orderly.Message) (*jetstream.PubAck, error) {
	subject := p.Subject(m.Topic)
	if !validSubject(subject) {
		return nil, outbox.Permanent(fmt.Errorf("natspub: message %d: topic %q is not a valid subject", m.ID, m.Topic))
	}
	if strings.ContainsAny(m.Key, "\r\n") {
		return nil, outbox.Permanent(fmt.Errorf("natspub: message %d: key %q has line breaks", m.ID, m.Key))
	}
	if m.MessageID == "" || strings.ContainsAny(m.MessageID, "\r\n") {
		return nil, outbox.Permanent(fmt.Errorf("natspub: message %d: message id %q is not usable as Nats-Msg-Id", m.ID, m.MessageID))
	}
	msgID := p.MsgID(m)
	msg := &nats.Msg{Subject: subject, Data: m.Payload, Header: nats.Header{}}
	msg.Header.Set(HeaderTopic, m.Topic)
	msg.Header.Set(HeaderKey, m.Key)
	if m.Sequence > 0 {
		msg.Header.Set(HeaderSequence, strconv.FormatInt(m.Sequence, 10))
	}
	// W3C trace context of the dispatch (the outbox relay's span, which continues the trace
	// that wrote the message), under its lower-case W3C names.
	tc := propagation.MapCarrier{}
	telemetry.Propagator.Inject(ctx, tc)
	for k, v := range tc {
		msg.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
	defer cancel()
	ack, err := p.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(msgID),
		// De-duplication works per stream: refuse a subject another stream captured.
		jetstream.WithExpectStream(p.cfg.Stream))
	switch {
	case err == nil:
		if ack.Duplicate {
			if err := p.checkDuplicate(ctx, m, msgID, ack); err != nil {
				return nil, err
			}
		}
		return ack, nil
	case errors.Is(err, nats.ErrMaxPayload):
		return nil, outbox.Permanent(fmt.Errorf("natspub: publish message %d to %s: %w", m.ID, subject, err))
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return nil, fmt.Errorf("natspub: publish message %d to %s: not connected to NATS (reconnecting): %w", m.ID, subject, err)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return nil, fmt.Errorf("natspub: publish message %d to %s: no ack in time (PublishTimeout %v): %w", m.ID, subject, p.cfg.PublishTimeout, err)
	default:
		return nil, fmt.Errorf("natspub: publish message %d to %s: %w", m.ID, subject, err)
	}
}

// checkDuplicate returns nil when the message the stream holds under msgID (at ack's
// sequence) is m, and an error when it is another message or cannot be told apart and m
// was never attempted before.
func (p *Publisher) checkDuplicate(ctx context.Context, m *orderly.Message, msgID string, ack *jetstream.PubAck) error {
	stored, err := p.stream.GetMsg(ctx, ack.Sequence)
	if err != nil {
		if m.Attempts > 1 {
			return nil // most likely our own earlier attempt
		}
		return fmt.Errorf("natspub: message %d: the stream reports Nats-Msg-Id %s as a duplicate (stream sequence %d) on a first attempt, and its stored copy cannot be read: %w",
			m.ID, msgID, ack.Sequence, err)
	}
	if stored.Header.Get(jetstream.MsgIDHeader) == msgID && stored.Header.Get(HeaderTopic) == m.Topic &&
		stored.Header.Get(HeaderKey) == m.Key && bytes.Equal(stored.Data, m.Payload) {
		return nil
	}
	return fmt.Errorf("natspub: message %d: the stream already holds another message with Nats-Msg-Id %s (stream sequence %d, subject %s): not stored; will retry after the duplicate window",
		m.ID, msgID, ack.Sequence, stored.Subject)
}

// Handler returns the outbox handler that publishes messages with Publish: use it as the
// relay's Default handler, or for each event topic. Its Call is idempotent per message
// through the Nats-Msg-Id de-duplication; an error leaves the message pending for retry,
// and the relay publishes no later message of the same key (order) until it succeeds.
func (p *Publisher) Handler() outbox.Handler {
	return outbox.Handler{Call: func(ctx context.Context, m *orderly.Message) error {
		_, err := p.Publish(ctx, m)
		return err
	}}
}

// redact removes passwords and tokens from a NATS URL list for errors and logs.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			scheme := ""
			if j := strings.Index(u, "://"); j >= 0 && j < at {
				scheme = u[:j+3]
			}
			parts[i] = scheme + "redacted@" + u[at+1:]
		}
	}
	return strings.Join(parts, ",")
}
