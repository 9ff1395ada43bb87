package natspub_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/natspub"
	"github.com/orderlyhq/orderly/outbox"
)

const natsServerBin = "/usr/sbin/nats-server"

// natsServer is a nats-server process of one test, with JetStream storing in dir.
type natsServer struct {
	t      *testing.T
	port   string
	dir    string
	cmd    *exec.Cmd
	cancel context.CancelFunc
}

// startNATSServer starts a nats-server of the test's own on a free port, with JetStream
// storing in a temporary directory, and waits until it accepts connections. The test is
// skipped when the binary is missing (failed with ORDERLY_TEST_REQUIRE_SERVICES=1). The
// process is killed at cleanup.
func startNATSServer(t *testing.T) *natsServer {
	t.Helper()
	if _, err := os.Stat(natsServerBin); err != nil {
		requireService(t, "this test starts its own "+natsServerBin+" (apt-get install nats-server): "+err.Error())
	}
	s := &natsServer{t: t, port: freePort(t), dir: t.TempDir()}
	t.Cleanup(s.stop)
	s.start()
	return s
}

// start runs the server on s.port and s.dir and waits until it accepts connections.
func (s *natsServer) start() {
	t := s.t
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	// Not t.Context(): it ends before the cleanups, which delete the stream through this server.
	ctx, cancel := context.WithCancel(context.Background())
	s.cmd, s.cancel = exec.CommandContext(ctx, natsServerBin,
		"-a", "127.0.0.1", "-p", s.port, "-js", "-sd", filepath.Join(s.dir, "jetstream")), cancel
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		cancel()
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "nats-server accepts connections on :"+s.port, func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+s.port, 100*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// stop kills the server and waits for it to exit. Safe to call twice.
func (s *natsServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cancel()
	s.cmd = nil
	if s.t.Failed() {
		if b, err := os.ReadFile(filepath.Join(s.dir, "server.log")); err == nil {
			s.t.Logf("nats-server log:\n%s", b)
		}
	}
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + s.port }

// freePort returns a TCP port on 127.0.0.1 that nobody listened on a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// eventually polls cond every 20 ms until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, what)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-tick.C:
		}
	}
}

// TestOutage: with the server gone, Call fails within PublishTimeout instead of blocking
// the relay; after the server comes back (same port, same store) the retry succeeds, the
// client reconnected on its own, and the stream holds each outbox message exactly once,
// also when a message stored before the outage is published again.
func TestOutage(t *testing.T) {
	t.Parallel()
	srv := startNATSServer(t)
	const timeout = time.Second
	b := setup(t, srv.url(), natspub.Config{PublishTimeout: timeout})
	call := b.p.Handler().Call
	m1 := message(1, orderly.TopicOrderClosed, "ord-1", orderly.OrderEvent{OrderID: "ord-1"})
	m2 := message(2, orderly.TopicOrderPaid, "ord-2", orderly.OrderEvent{OrderID: "ord-2"})
	if err := call(t.Context(), m1); err != nil {
		t.Fatal(err)
	}

	srv.stop()
	start := time.Now()
	err := call(t.Context(), m2)
	elapsed := time.Since(start)
	t.Logf("Call with the server down: %v after %v", err, elapsed)
	if err == nil {
		t.Fatal("Call succeeded with the server down")
	}
	if errors.Is(err, context.Canceled) || elapsed > timeout+250*time.Millisecond {
		t.Fatalf("Call took %v (PublishTimeout %v): %v", elapsed, timeout, err)
	}

	// Once the client has noticed, a publish fails at once: nothing waits in a client buffer.
	eventually(t, 5*time.Second, "the publisher notices the outage", func() bool { return !b.p.Connected() })
	start = time.Now()
	err = call(t.Context(), m2)
	elapsed = time.Since(start)
	t.Logf("Call while reconnecting: %v after %v", err, elapsed)
	if err == nil || elapsed > timeout/2 {
		t.Fatalf("Call while reconnecting: %v after %v; want an error at once", err, elapsed)
	}

	srv.start()
	start = time.Now()
	eventually(t, 15*time.Second, "the publisher reconnects", b.p.Connected)
	t.Logf("reconnected %v after the restart", time.Since(start))
	if err := call(t.Context(), m2); err != nil {
		t.Fatalf("retry after the restart: %v", err)
	}
	// The relay crashed after publishing m1 and before marking it delivered: it sends m1 again.
	ack, err := b.p.Publish(t.Context(), m1)
	if err != nil {
		t.Fatal(err)
	}
	if !ack.Duplicate {
		t.Errorf("m1 published again after the restart was stored again: %+v", ack)
	}
	got := readAll(t, b.js, b.cfg.Stream, 2)
	if got[0].MsgID != m1.MessageID || got[1].MsgID != m2.MessageID {
		t.Fatalf("msg ids %q, %q; want %s, %s", got[0].MsgID, got[1].MsgID, m1.MessageID, m2.MessageID)
	}
}

// TestLateRefundAfterCloseInOrder: the broker is unreachable around the close of orders
// whose payment then succeeds late. order.closed fails and waits for its retry while the
// late payment is refunded at the gateway; payment.refunded, an event about the same
// order, must not overtake it. Subscribers see, for every order, order.closed (sequence 1)
// and then payment.refunded (sequence 2).
func TestLateRefundAfterCloseInOrder(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startNATSServer(t)
	b := setup(t, srv.url(), natspub.Config{PublishTimeout: 500 * time.Millisecond})
	h := b.p.Handler()
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{
		orderly.TopicOrderClosed: h, orderly.TopicOrderPaid: h, orderly.TopicPaymentRefunded: h,
	}})
	e.SetStock(t, "SKU-1", 10)
	const orders = 4
	type paid struct {
		o *orderly.Order
		p *orderly.Payment
	}
	var ps []paid
	for range orders {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
		p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, paid{o, p})
	}

	srv.stop()
	eventually(t, 5*time.Second, "the publisher notices the outage", func() bool { return !b.p.Connected() })
	for _, x := range ps {
		if _, err := e.Orders.CancelOrder(ctx, x.o.ID, "buyer", ""); err != nil {
			t.Fatal(err)
		}
	}
	e.Drain(t) // releases delivered; order.closed fails and waits for its retry
	if p := list(t, e, orderly.MessagePending); len(p) != orders || p[0].Topic != orderly.TopicOrderClosed || p[0].Attempts != 1 {
		t.Fatalf("pending after the failed publish: %d messages, first %+v; want %d order.closed retrying", len(p), p[0], orders)
	}

	srv.start()
	eventually(t, 15*time.Second, "the publisher reconnects", b.p.Connected)
	for _, x := range ps {
		res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: x.p.ID, OrderID: x.o.ID, ChannelTxnID: "txn-" + x.p.ID,
			Amount: x.p.Amount, Currency: x.p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: e.Clock.Now()})
		if err != nil || !res.Refund {
			t.Fatalf("late payment %s: %+v, %v; want a refund", x.p.ID, res, err)
		}
	}
	// The refunds reach the gateway at once; their events wait behind order.closed.
	e.Drain(t)
	e.Drain(t)
	for _, x := range ps {
		if got := e.Gateway.Refunded(x.p.ID); got != x.p.Amount {
			t.Fatalf("payment %s: gateway refunded %d, want %d", x.p.ID, got, x.p.Amount)
		}
	}
	readAll(t, b.js, b.cfg.Stream, 0)

	e.Clock.Advance(2 * time.Second) // order.closed's retry is due (1 s ± 50 %)
	for pass := 0; len(list(t, e, orderly.MessagePending)) > 0; pass++ {
		if pass == 10 {
			t.Fatalf("still pending after 10 passes: %+v", list(t, e, orderly.MessagePending))
		}
		e.Drain(t)
	}
	got := map[string][]string{}
	for _, m := range readAll(t, b.js, b.cfg.Stream, 2*orders) {
		got[m.Key] = append(got[m.Key], m.Topic+" "+m.Sequence)
	}
	for _, x := range ps {
		want := []string{orderly.TopicOrderClosed + " 1", orderly.TopicPaymentRefunded + " 2"}
		if fmt.Sprint(got[x.o.ID]) != fmt.Sprint(want) {
			t.Errorf("order %s: subscribers saw %v, want %v", x.o.ID, got[x.o.ID], want)
		}
	}
}

// list returns an engine's outbox messages in a state, oldest first.
func list(t *testing.T, e *enginetest.Env, state string) []*orderly.Message {
	t.Helper()
	return outboxList(t, e.Store, state)
}
