package engine_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/testdb"
)

// idleAdapter is a real channel no test calls: only its name counts here.
type idleAdapter struct {
	orderly.Gateway
	name string
}

func (a idleAdapter) Name() string { return a.name }
func (a idleAdapter) Verify(http.Header, []byte, time.Time) (*channel.Notification, error) {
	return nil, errors.New("not used")
}
func (a idleAdapter) Ack(http.ResponseWriter, error) {}

// TestSimChannelRule: the simulated channel sim is served exactly when a Gateway is given,
// alone or beside real channels; with a real channel and no Gateway the default channel must
// be a served one (or routes split the attempts); with neither every attempt is refused.
func TestSimChannelRule(t *testing.T) {
	t.Parallel()
	acme := []channel.Adapter{idleAdapter{name: "acme"}}
	for _, tc := range []struct {
		name   string
		edit   func(*engine.Config)
		field  string // "" when Validate accepts it
		served bool
	}{
		{"no channel", func(*engine.Config) {}, "", false},
		{"no channel, sim named", func(c *engine.Config) { c.DefaultChannel = "sim" }, "DefaultChannel", false},
		{"sim", func(c *engine.Config) { c.Gateway = sim.New() }, "", true},
		{"sim, sim named", func(c *engine.Config) { c.Gateway, c.DefaultChannel = sim.New(), "sim" }, "", true},
		{"sim, other default", func(c *engine.Config) { c.Gateway, c.DefaultChannel = sim.New(), "acme" }, "DefaultChannel", true},
		{"real channel, its default", func(c *engine.Config) { c.Channels, c.DefaultChannel = acme, "acme" }, "", false},
		{"real channel, no default", func(c *engine.Config) { c.Channels = acme }, "DefaultChannel", false},
		{"real channel, sim default", func(c *engine.Config) { c.Channels, c.DefaultChannel = acme, "sim" }, "DefaultChannel", false},
		{"real channel, routes", func(c *engine.Config) {
			c.Channels, c.ChannelRoutes = acme, []channel.Route{{Channel: "acme", Weight: 1}}
		}, "", false},
		{"real channel and sim", func(c *engine.Config) { c.Channels, c.Gateway = acme, sim.New() }, "", true},
		{"real channel and sim, real default", func(c *engine.Config) {
			c.Channels, c.DefaultChannel, c.Gateway = acme, "acme", sim.New()
		}, "", true},
		{"a real channel named sim", func(c *engine.Config) {
			c.Channels, c.DefaultChannel = []channel.Adapter{idleAdapter{name: "sim"}}, "sim"
		}, "Channels", false},
	} {
		cfg := engine.Config{CallbackSecret: []byte("s")}
		tc.edit(&cfg)
		err := cfg.Validate()
		var ce *engine.ConfigError
		if tc.field == "" && err != nil || tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field) {
			t.Errorf("%s: Validate = %v, want an error on %q", tc.name, err, tc.field)
		}
		if cfg.SimServed() != tc.served {
			t.Errorf("%s: SimServed = %t, want %t", tc.name, cfg.SimServed(), tc.served)
		}
	}
}

// TestSimChannelNotBuilt: with a real channel and no Gateway, no simulated gateway is built
// (Config.Gateway is nil), only the real channel is served, and the database gets no
// table of the simulator.
func TestSimChannelNotBuilt(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.Channels, cfg.DefaultChannel, cfg.Gateway = []channel.Adapter{idleAdapter{name: "acme"}}, "acme", nil
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if got := e.Payments().Served(); len(got) != 1 || got[0] != "acme" {
		t.Fatalf("served %v; want [acme]", got)
	}
	var tables int
	if err := testdb.Raw(t, cfg.DatabaseURL).QueryRowContext(t.Context(),
		`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'sim\_%' ESCAPE '\'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("simulator tables: %d (%v), want none", tables, err)
	}
}

// TestNoChannelRefusesPayments: an engine given neither Gateway nor Channels (a process that
// takes no payments, as `orderly reconcile`) opens, serves no channel, creates no simulator
// table, and refuses every payment attempt with EINVALID, leaving the order unpaid and
// without an attempt; it used to fall back to the simulator.
func TestNoChannelRefusesPayments(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.Gateway = nil
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if got := e.Payments().Served(); len(got) != 0 {
		t.Fatalf("served %v; want none", got)
	}
	if _, err := e.Orders().SetStock(t.Context(), "sku", 5); err != nil {
		t.Fatal(err)
	}
	o, _, err := e.Orders().CreateOrder(t.Context(), &orderly.CreateOrderParams{UserID: "u", Currency: "EUR",
		Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"", "sim", "stripe"} {
		_, err := e.Payments().StartPayment(t.Context(), &orderly.StartPaymentParams{OrderID: o.ID, Channel: ch})
		if orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), "no payment channel is configured") {
			t.Errorf("channel %q: StartPayment = %v, want EINVALID: no payment channel is configured", ch, err)
		}
	}
	got, err := e.Orders().Order(t.Context(), o.ID)
	if err != nil || got.PayStatus != o.PayStatus || got.State != orderly.StatePendingPayment {
		t.Fatalf("order after the refusals: %+v (%v), want it unchanged", got, err)
	}
	var tables, payments int
	raw := testdb.Raw(t, cfg.DatabaseURL)
	if err := raw.QueryRowContext(t.Context(), `SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'sim\_%' ESCAPE '\'),
		(SELECT count(*) FROM payments)`).Scan(&tables, &payments); err != nil || tables != 0 || payments != 0 {
		t.Fatalf("simulator tables %d, payments %d (%v); want none", tables, payments, err)
	}
}
