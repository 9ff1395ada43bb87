package natspub_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/natspub"
	"github.com/orderlyhq/orderly/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(anchored{m}) }

// anchored runs the tests while an anchor stream exists on the shared NATS server.
// nats-server (2.9) removes an account's JetStream directory when its last stream is
// deleted; a stream created at that moment by a parallel test fails with "error creating
// store for stream" (err_code 10049). With the anchor, the tests' deletions never remove
// the last stream.
type anchored struct{ m *testing.M }

func (a anchored) Run() int {
	url := os.Getenv("ORDERLY_TEST_NATS_URL")
	if url == "" {
		return a.m.Run()
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return a.m.Run() // the tests report the unreachable server
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	defer func() { nc.Close(); <-closed }()
	js, err := jetstream.New(nc)
	if err != nil {
		return a.m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := "ORDERLY_TEST_ANCHOR_" + rand.Text()[:12]
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"orderlytest_anchor." + name}}); err != nil {
		return a.m.Run()
	}
	code := a.m.Run()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, name)
	return code
}

// requireService skips the test when the variable naming a service's address is unset, or
// fails it when ORDERLY_TEST_REQUIRE_SERVICES=1 (docs/development.md).
func requireService(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("ORDERLY_TEST_REQUIRE_SERVICES") == "1" {
		t.Fatal(why + " (ORDERLY_TEST_REQUIRE_SERVICES=1)")
	}
	t.Skip(why)
}

// natsURL returns the address of the machine's NATS server.
func natsURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("ORDERLY_TEST_NATS_URL")
	if u == "" {
		requireService(t, "set ORDERLY_TEST_NATS_URL (e.g. nats://127.0.0.1:4222) to run the NATS tests")
	}
	return u
}

// bundle is what setup returns: the publisher under test and a separate connection to
// inspect the stream with.
type bundle struct {
	p   *natspub.Publisher
	cfg natspub.Config
	js  jetstream.JetStream
}

// setup connects a publisher to url with a stream name and subject prefix of its own
// (random suffix) and registers cleanups that delete the stream and close both connections.
func setup(t *testing.T, url string, cfg natspub.Config) *bundle {
	t.Helper()
	suffix := strings.ToLower(rand.Text()[:12])
	cfg.URL = url
	cfg.Stream = "ORDERLY_TEST_" + strings.ToUpper(suffix)
	cfg.SubjectPrefix = "orderlytest." + suffix
	b := &bundle{cfg: cfg, js: inspector(t, url)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.js.DeleteStream(ctx, cfg.Stream); err != nil {
			t.Logf("delete stream %s: %v", cfg.Stream, err)
		}
	})
	p, err := natspub.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	b.p = p
	return b
}

// inspector opens a second connection, closed at cleanup, for reading back what was stored.
func inspector(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	t.Cleanup(func() { nc.Close(); <-closed })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// message returns an outbox message as the relay hands it to Call, on its first attempt,
// with a message id made from id (UUID-shaped, as the store mints them).
func message(id int64, topic, key string, payload any) *orderly.Message {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return &orderly.Message{ID: id, MessageID: fmt.Sprintf("00000000-0000-7000-8000-%012d", id), Topic: topic, Key: key,
		Payload: b, State: orderly.MessagePending, Attempts: 1}
}

// storedMsg is one message read back from the stream.
type storedMsg struct {
	Subject, MsgID, Topic, Key, Sequence, Data string
}

// readAll checks that the stream holds exactly want messages and reads them, in stream
// order, with an ephemeral pull consumer.
func readAll(t *testing.T, js jetstream.JetStream, stream string, want int) []storedMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(want) {
		t.Fatalf("stream %s holds %d messages, want %d", stream, got, want)
	}
	if want == 0 {
		return nil
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(want, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []storedMsg
	for m := range batch.Messages() {
		h := m.Headers()
		got = append(got, storedMsg{
			Subject: m.Subject(), MsgID: h.Get(jetstream.MsgIDHeader),
			Topic: h.Get(natspub.HeaderTopic), Key: h.Get(natspub.HeaderKey), Sequence: h.Get(natspub.HeaderSequence),
			Data: string(m.Data()),
		})
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	if len(got) != want {
		t.Fatalf("consumer read %d messages, want %d", len(got), want)
	}
	return got
}

// TestPublishReadBack: each event topic is stored on "<prefix>.<topic>" with its payload
// and the headers Nats-Msg-Id (MsgIDPrefix + message id), Orderly-Topic, Orderly-Key and,
// for an event, Orderly-Sequence.
func TestPublishReadBack(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{MsgIDPrefix: "db1-"})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	closed := message(7, orderly.TopicOrderClosed, "ord-1", orderly.OrderEvent{OrderID: "ord-1", State: "closed", Reason: "payment_timeout", At: at, Sequence: 3})
	closed.Sequence = 3
	cases := []struct {
		msg                *orderly.Message
		wantMsgID, wantSeq string
	}{
		{closed, "db1-00000000-0000-7000-8000-000000000007", "3"},
		{message(8, orderly.TopicOrderPaid, "ord-2", orderly.OrderEvent{OrderID: "ord-2", State: "paid", At: at}), "db1-00000000-0000-7000-8000-000000000008", ""},
		{message(1234567890123, orderly.TopicPaymentRefunded, "ord-3", orderly.PaymentRef{PaymentID: "pay-3", OrderID: "ord-3", Amount: 1999}),
			"db1-00000000-0000-7000-8000-1234567890123", ""},
	}
	call := b.p.Handler().Call
	for _, c := range cases {
		if err := call(t.Context(), c.msg); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, b.js, b.cfg.Stream, len(cases))
	for i, c := range cases {
		want := storedMsg{
			Subject: b.cfg.SubjectPrefix + "." + c.msg.Topic, MsgID: c.wantMsgID,
			Topic: c.msg.Topic, Key: c.msg.Key, Sequence: c.wantSeq, Data: string(c.msg.Payload),
		}
		if got[i] != want {
			t.Errorf("message %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

// TestPublishTwiceStoredOnce: the same outbox message published again (the relay retrying
// after a crash between publish and marking it delivered) is acknowledged as a duplicate
// and stored once; a message with the same outbox id from another database (its own
// message id) is not a duplicate.
func TestPublishTwiceStoredOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{})
	m := message(42, orderly.TopicOrderClosed, "ord-42", orderly.OrderEvent{OrderID: "ord-42"})
	first, err := b.p.Publish(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.p.Publish(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || second.Sequence != first.Sequence || second.Stream != b.cfg.Stream {
		t.Fatalf("acks: first %+v, second %+v; want the second a duplicate of the first", first, second)
	}
	if err := b.p.Handler().Call(t.Context(), m); err != nil {
		t.Fatalf("a duplicate of our own message is a successful delivery, got %v", err)
	}
	readAll(t, b.js, b.cfg.Stream, 1)

	other := *m
	other.MessageID = "00000000-0000-7000-8000-999999999999"
	if ack, err := b.p.Publish(t.Context(), &other); err != nil || ack.Duplicate {
		t.Fatalf("outbox id 42 of another database: ack %+v, err %v; want stored", ack, err)
	}
	readAll(t, b.js, b.cfg.Stream, 2)
}

// TestUnexpectedDuplicateIsAnError: when the stream already holds another message under our
// message's Nats-Msg-Id (another publisher took it), the duplicate ack is an error, not a
// delivery, so the outbox keeps the message and retries it.
func TestUnexpectedDuplicateIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{})
	m := message(5, orderly.TopicOrderClosed, "ord-5", orderly.OrderEvent{OrderID: "ord-5", State: "closed", Sequence: 1})
	// Another publisher's message, stored first under the same id.
	foreign := &nats.Msg{Subject: b.p.Subject(orderly.TopicOrderClosed), Data: []byte(`{"order_id":"someone-else"}`), Header: nats.Header{}}
	if _, err := b.js.PublishMsg(t.Context(), foreign, jetstream.WithMsgID(b.p.MsgID(m))); err != nil {
		t.Fatal(err)
	}
	for _, attempts := range []int64{1, 2} {
		m.Attempts = attempts
		ack, err := b.p.Publish(t.Context(), m)
		if err == nil || !strings.Contains(err.Error(), "already holds another message") {
			t.Fatalf("attempt %d: Publish = %+v, %v; want an error naming the other message", attempts, ack, err)
		}
		if outbox.IsPermanent(err) {
			t.Fatalf("attempt %d: %v is permanent; want a retry", attempts, err)
		}
		if err := b.p.Handler().Call(t.Context(), m); err == nil {
			t.Fatalf("attempt %d: Call reported a dropped message as delivered", attempts)
		}
	}
	got := readAll(t, b.js, b.cfg.Stream, 1)
	if got[0].Data != `{"order_id":"someone-else"}` {
		t.Fatalf("stream holds %+v", got[0])
	}
}

// TestNewStream: New creates the stream with the subjects and duplicate window, and on an
// existing stream adds them while keeping the operator's other settings.
func TestNewStream(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{})
	ctx := t.Context()
	info := streamInfo(t, b.js, b.cfg.Stream)
	if got := info.Config.Subjects; len(got) != 1 || got[0] != b.cfg.SubjectPrefix+".>" {
		t.Errorf("subjects %q, want [%s.>]", got, b.cfg.SubjectPrefix)
	}
	if info.Config.Duplicates != 2*time.Minute {
		t.Errorf("duplicate window %v, want the default 2m", info.Config.Duplicates)
	}

	// An operator limits the stream and adds a subject of their own.
	sc := info.Config
	sc.MaxMsgs = 1000
	sc.Subjects = append(sc.Subjects, b.cfg.SubjectPrefix+"_ops.>")
	if _, err := b.js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	cfg := b.cfg
	cfg.SubjectPrefix += "_v2"
	cfg.Duplicates = 5 * time.Minute
	p2, err := natspub.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p2.Close()
	info = streamInfo(t, b.js, b.cfg.Stream)
	wantSubjects := []string{b.cfg.SubjectPrefix + ".>", b.cfg.SubjectPrefix + "_ops.>", cfg.SubjectPrefix + ".>"}
	if strings.Join(info.Config.Subjects, " ") != strings.Join(wantSubjects, " ") {
		t.Errorf("subjects %q, want %q", info.Config.Subjects, wantSubjects)
	}
	if info.Config.Duplicates != 5*time.Minute || info.Config.MaxMsgs != 1000 {
		t.Errorf("duplicates %v, max msgs %d; want 5m and the operator's 1000", info.Config.Duplicates, info.Config.MaxMsgs)
	}
}

func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo()
}

// TestPublishPermanentErrors: messages that can never be published are reported as
// permanent, so the relay moves them to dead at once instead of retrying them.
func TestPublishPermanentErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, natsURL(t), natspub.Config{})
	for _, m := range []*orderly.Message{
		message(1, "order closed", "k", 1),
		message(2, "order.*", "k", 1),
		message(3, "order..closed", "k", 1),
		message(4, "", "k", 1),
		message(5, orderly.TopicOrderClosed, "k\r\nEvil: 1", 1),
		{ID: 6, Topic: orderly.TopicOrderClosed, Key: "k", Payload: make([]byte, 2<<20)}, // over the default 1 MiB max_payload
	} {
		err := b.p.Handler().Call(t.Context(), m)
		if !outbox.IsPermanent(err) {
			t.Errorf("message %d (topic %q): got %v, want a permanent error", m.ID, m.Topic, err)
		}
	}
	readAll(t, b.js, b.cfg.Stream, 0)
}

// TestConfigErrors: New refuses invalid configurations before connecting.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]natspub.Config{
		"no URL":            {},
		"stream with a dot": {URL: "nats://127.0.0.1:1", Stream: "a.b"},
		"wildcard prefix":   {URL: "nats://127.0.0.1:1", SubjectPrefix: "orderly.*"},
		"empty token":       {URL: "nats://127.0.0.1:1", SubjectPrefix: "orderly."},
		"negative timeout":  {URL: "nats://127.0.0.1:1", PublishTimeout: -time.Second},
		"negative window":   {URL: "nats://127.0.0.1:1", Duplicates: -time.Second},
		"line break in id":  {URL: "nats://127.0.0.1:1", MsgIDPrefix: "a\nb"},
	} {
		if p, err := natspub.New(t.Context(), cfg); err == nil || !strings.HasPrefix(err.Error(), "natspub: Config") {
			if p != nil {
				p.Close()
			}
			t.Errorf("%s: got %v, want a Config error", name, err)
		}
	}
}

// TestNewUnreachable: without a server New fails instead of waiting for one.
func TestNewUnreachable(t *testing.T) {
	t.Parallel()
	p, err := natspub.New(t.Context(), natspub.Config{URL: "nats://user:secret@127.0.0.1:" + freePort(t)})
	if err == nil {
		p.Close()
		t.Fatal("New succeeded without a server")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error shows the password: %v", err)
	}
}
