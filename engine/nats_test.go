package engine_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/natspub"
)

// TestNATSStreamAndPrefix: Config.NATSStream and NATSSubjectPrefix reach the publisher: a
// cancelled order's order.closed is stored in that stream under <prefix>.order.closed.
// The stream is kept (and purged at the start): nats-server 2.9 drops an account's
// JetStream store when its last stream is deleted, under other tests' feet.
func TestNATSStreamAndPrefix(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t, "nats")
	const stream, prefix = "ORDERLY_ENGINE_PREFIX_TEST", "orderlyprefixtest"
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if s, err := js.Stream(ctx, stream); err == nil {
		if err := s.Purge(ctx); err != nil {
			t.Fatal(err)
		}
	}

	cfg := config(t)
	cfg.Addr, cfg.NATSURL, cfg.NATSStream, cfg.NATSSubjectPrefix = "127.0.0.1:0", url, stream, prefix
	cfg.OutboxPollInterval = 20 * time.Millisecond
	e, err := engine.Open(ctx, cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close(t.Context()) }()
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Orders().SetStock(ctx, "sku", 5); err != nil {
		t.Fatal(err)
	}
	o, _, err := e.Orders().CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u", Currency: "EUR",
		Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Orders().CancelOrder(ctx, o.ID, "buyer", ""); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.GetLastMsgForSubject(ctx, prefix+".order.closed")
		if err == nil {
			if got := m.Header.Get(natspub.HeaderKey); got != o.ID {
				t.Errorf("%s.order.closed: %s %q, want the order %s", prefix, natspub.HeaderKey, got, o.ID)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message on %s.order.closed in stream %s after 10 s: %v", prefix, stream, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
