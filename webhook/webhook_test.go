package webhook_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// receiver is a merchant endpoint that records what it gets and answers fail(n) for the
// n-th call (1-based) of an event key, 200 otherwise.
type receiver struct {
	mu    sync.Mutex
	calls []call
	fail  func(key string, n int) bool
	srv   *httptest.Server
}

type call struct {
	header http.Header
	body   []byte
	env    webhook.Envelope
}

func newReceiver(t *testing.T, fail func(key string, n int) bool) *receiver {
	rc := &receiver{fail: fail}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var env webhook.Envelope
		_ = json.Unmarshal(b, &env)
		rc.mu.Lock()
		n := 1
		for _, c := range rc.calls {
			if c.env.Key == env.Key {
				n++
			}
		}
		rc.calls = append(rc.calls, call{r.Header.Clone(), b, env})
		rc.mu.Unlock()
		if rc.fail != nil && rc.fail(env.Key, n) {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]call(nil), rc.calls...)
}

// setup returns an engine env with a webhook service on its store and a subscriber.
func setup(t *testing.T, maxAttempts int64, rc *receiver) (*enginetest.Env, *orderly.Webhook, string) {
	t.Helper()
	e := enginetest.New(t, enginetest.Options{MaxAttempts: maxAttempts})
	svc, err := webhook.New(webhook.Config{Store: e.Store})
	if err != nil {
		t.Fatal(err)
	}
	w, secret, err := svc.Subscribe(t.Context(), rc.srv.URL+"/hooks", []string{orderly.TopicOrderClosed, orderly.TopicOrderPaid}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e, w, secret
}

// emit writes events about orders in one transaction, in list order.
func emit(t *testing.T, e *enginetest.Env, topic string, orderIDs ...string) {
	t.Helper()
	err := e.Store.InTx(t.Context(), func(tx store.Tx) error {
		for _, id := range orderIDs {
			m, err := outbox.NewEvent(t.Context(), tx, topic, id, &orderly.OrderEvent{OrderID: id, State: orderly.StateClosed, At: e.Clock.Now()}, e.Clock.Now())
			if err != nil {
				return err
			}
			if err := tx.OutboxInsert(t.Context(), []*store.OutboxInsertParams{m}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// drain runs the relay until nothing is due, advancing the clock by step between passes.
func drain(t *testing.T, e *enginetest.Env, passes int, step time.Duration) {
	t.Helper()
	for range passes {
		if _, err := e.Relay.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
		e.Clock.Advance(step)
	}
}

func TestDeliverySignedAndVerifiable(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, nil)
	e, w, secret := setup(t, 0, rc)
	emit(t, e, orderly.TopicOrderClosed, "ord-1")
	emit(t, e, orderly.TopicRefundFailed, "ord-1") // not subscribed
	drain(t, e, 2, 0)
	got := rc.got()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1 (order.closed only): %+v", len(got), got)
	}
	c := got[0]
	if err := payment.Verify([]byte(secret), c.header.Get(payment.SignatureHeader), c.body, time.Now(), time.Minute); err != nil {
		t.Errorf("signature: %v", err)
	}
	if err := payment.Verify([]byte("another secret!!"), c.header.Get(payment.SignatureHeader), c.body, time.Now(), time.Minute); err == nil {
		t.Error("signature verifies with another secret")
	}
	var ev orderly.OrderEvent
	if c.env.Topic != orderly.TopicOrderClosed || c.env.Key != "ord-1" || c.env.Sequence != 1 || c.env.ID == "" ||
		json.Unmarshal(c.env.Data, &ev) != nil || ev.OrderID != "ord-1" || ev.Sequence != 1 {
		t.Errorf("envelope = %+v (data %s)", c.env, c.env.Data)
	}
	if c.header.Get(webhook.HeaderEventID) != c.env.ID || c.header.Get(webhook.HeaderTopic) != orderly.TopicOrderClosed ||
		c.header.Get(webhook.HeaderSequence) != "1" || c.header.Get("Content-Type") != "application/json" {
		t.Errorf("headers = %v", c.header)
	}
	// The delivery message is an ordinary outbox message, keyed per subscriber and order.
	var delivered []*orderly.Message
	if err := e.Store.Read(t.Context(), func(tx store.Tx) (err error) {
		delivered, err = tx.OutboxList(t.Context(), orderly.MessageDelivered, 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, m := range delivered {
		keys[m.Topic] = m.Key
	}
	if keys[orderly.TopicWebhookDeliver] != "webhook:"+w.ID+":ord-1" {
		t.Errorf("delivered topics and keys = %v, want a webhook.deliver keyed webhook:%s:ord-1", keys, w.ID)
	}
}

func TestFailingEndpointRetriedThenDeadAndRedriven(t *testing.T) {
	t.Parallel()
	healthy := false
	var mu sync.Mutex
	rc := newReceiver(t, func(string, int) bool { mu.Lock(); defer mu.Unlock(); return !healthy })
	e, _, _ := setup(t, 3, rc)
	emit(t, e, orderly.TopicOrderClosed, "ord-1")
	drain(t, e, 6, 10*time.Minute) // past the 5 min backoff cap each time
	if n := len(rc.got()); n != 3 {
		t.Fatalf("%d calls, want 3 (MaxAttempts) before dead", n)
	}
	var dead []*orderly.Message
	if err := e.Store.Read(t.Context(), func(tx store.Tx) (err error) {
		dead, err = tx.OutboxList(t.Context(), orderly.MessageDead, 10)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Topic != orderly.TopicWebhookDeliver || dead[0].Attempts != 3 ||
		!strings.Contains(dead[0].LastError, "500") {
		t.Fatalf("dead = %+v, want the webhook.deliver message after 3 attempts with the 500 answer", dead)
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if err := e.Store.InTx(t.Context(), func(tx store.Tx) error {
		ok, err := tx.OutboxRedrive(t.Context(), dead[0].ID, e.Clock.Now())
		if !ok && err == nil {
			t.Error("re-drive changed nothing")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	drain(t, e, 2, 0)
	if got := rc.got(); len(got) != 4 || got[3].env.Key != "ord-1" {
		t.Errorf("%d calls after the re-drive, want 4", len(got))
	}
}

func TestPerOrderOrderKept(t *testing.T) {
	t.Parallel()
	// The first delivery of ord-1 fails once: its second event must wait for it.
	rc := newReceiver(t, func(key string, n int) bool { return key == "ord-1" && n == 1 })
	e, _, _ := setup(t, 0, rc)
	emit(t, e, orderly.TopicOrderClosed, "ord-1", "ord-2")
	emit(t, e, orderly.TopicOrderPaid, "ord-1", "ord-2")
	drain(t, e, 6, 10*time.Minute)
	seqs := map[string][]int64{}
	for _, c := range rc.got() {
		seqs[c.env.Key] = append(seqs[c.env.Key], c.env.Sequence)
	}
	if got := seqs["ord-1"]; len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 2 {
		t.Errorf("ord-1 sequences received = %v, want [1 1 2] (1 failed, retried, then 2)", got)
	}
	if got := seqs["ord-2"]; len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Errorf("ord-2 sequences received = %v, want [1 2], not held up by ord-1", got)
	}
}

func TestSubscribeRefuses(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	svc, err := webhook.New(webhook.Config{Store: e.Store, Topics: orderly.EventTopics(e.Engine.Flows())}) // group-buy's too
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url, secret string
		topics            []string
	}{
		{"ftp", "ftp://example.com/x", "", []string{"*"}},
		{"file", "file:///etc/passwd", "", []string{"*"}},
		{"javascript", "javascript:alert(1)", "", []string{"*"}},
		{"gopher", "gopher://127.0.0.1:6379/_FLUSHALL", "", []string{"*"}},
		{"no host", "http://", "", []string{"*"}},
		{"relative", "/hooks", "", []string{"*"}},
		{"credentials", "https://user:pw@example.com/", "", []string{"*"}},
		{"no topics", "https://example.com/", "", nil},
		{"blank topic", "https://example.com/", "", []string{""}},
		{"short secret", "https://example.com/", "short", []string{"*"}},
		{"unknown topic", "https://example.com/", "", []string{"bogus.topic"}},
		{"command topic", "https://example.com/", "", []string{orderly.TopicRefundExecute}},
		{"delivery topic", "https://example.com/", "", []string{orderly.TopicWebhookDeliver}},
		{"wildcard matching nothing", "https://example.com/", "", []string{"bogus.*"}},
		{"bare prefix wildcard", "https://example.com/", "", []string{"order*"}},
		{"duplicate topic", "https://example.com/", "", []string{orderly.TopicOrderPaid, orderly.TopicOrderPaid}},
		{"port out of range", "http://h:99999/x", "", []string{"*"}},
		{"port zero", "http://h:0/x", "", []string{"*"}},
		{"empty port", "http://h:/x", "", []string{"*"}},
		{"host with a bad character", "http://exa%21mple.com/x", "", []string{"*"}},
		{"host label too long", "http://" + strings.Repeat("a", 64) + ".com/", "", []string{"*"}},
	} {
		_, _, err := svc.Subscribe(t.Context(), tc.url, tc.topics, tc.secret)
		if orderly.ErrorCode(err) != orderly.EINVALID {
			t.Errorf("%s: Subscribe = %v, want EINVALID", tc.name, err)
		}
	}
	for _, ok := range []struct {
		url    string
		topics []string
	}{
		{"http://127.0.0.1:18099/slow", []string{orderly.TopicOrderPaid, orderly.TopicRefundSucceeded, orderly.TopicOrderRefunded}},
		{"https://[::1]:8443/h", []string{"order.*"}},
		{"https://shop.example/hooks/orderly", []string{"refund.*", orderly.TopicPaymentRefunded, "order.group_failed"}},
	} {
		w, _, err := svc.Subscribe(t.Context(), ok.url, ok.topics, "")
		if err != nil || w.URL != ok.url || strings.Join(w.Topics, ",") != strings.Join(ok.topics, ",") {
			t.Errorf("Subscribe(%s, %v) = %+v, %v; want accepted", ok.url, ok.topics, w, err)
			continue
		}
		if err := svc.Unsubscribe(t.Context(), w.ID); err != nil {
			t.Error(err)
		}
	}
	_, _, err = svc.Subscribe(t.Context(), "https://example.com/", []string{"bogus.topic"}, "")
	if err == nil || !strings.Contains(err.Error(), `"bogus.topic" is not an event topic`) || !strings.Contains(err.Error(), orderly.TopicRefundSucceeded) {
		t.Errorf("unknown topic: %v, want a message naming it and the known topics", err)
	}
	w, secret, err := svc.Subscribe(t.Context(), "https://example.com/hooks", []string{"*"}, "a-secret-of-16-bytes")
	if err != nil || secret != "a-secret-of-16-bytes" {
		t.Fatalf("Subscribe = %v, %q", err, secret)
	}
	list, err := svc.Webhooks(t.Context())
	if err != nil || len(list) != 1 || list[0].ID != w.ID || list[0].Secret != "" {
		t.Errorf("Webhooks = %+v, %v: want one, without its secret", list, err)
	}
	if err := svc.Unsubscribe(t.Context(), w.ID); err != nil {
		t.Error(err)
	}
	if err := svc.Unsubscribe(t.Context(), w.ID); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("second Unsubscribe = %v, want ENOTFOUND", err)
	}
}

// TestWantsWildcards: "*" takes every event, "<prefix>.*" the events under its prefix, a
// topic itself; nothing else.
func TestWantsWildcards(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		topics []string
		topic  string
		want   bool
	}{
		{[]string{"*"}, orderly.TopicRefundFailed, true},
		{[]string{"order.*"}, orderly.TopicOrderClosed, true},
		{[]string{"order.*"}, "order.group_failed", true},
		{[]string{"order.*"}, orderly.TopicRefundSucceeded, false},
		{[]string{"refund.*"}, orderly.TopicRefundSucceeded, true},
		{[]string{orderly.TopicOrderPaid}, orderly.TopicOrderPaid, true},
		{[]string{orderly.TopicOrderPaid}, orderly.TopicOrderClosed, false},
		{[]string{"order*"}, orderly.TopicOrderClosed, false},
	} {
		w := &orderly.Webhook{Topics: tc.topics}
		if got := w.Wants(tc.topic); got != tc.want {
			t.Errorf("%v wants %s = %v, want %v", tc.topics, tc.topic, got, tc.want)
		}
	}
}
