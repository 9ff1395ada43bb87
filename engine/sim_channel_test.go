package engine_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
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

// TestSimChannelRule: the simulated channel sim is served without a real channel, or with
// EnableSimChannel; with a real channel the default channel must be a served one (or routes
// split the attempts), and a Gateway that would never be called is refused.
func TestSimChannelRule(t *testing.T) {
	t.Parallel()
	acme := []channel.Adapter{idleAdapter{name: "acme"}}
	for _, tc := range []struct {
		name   string
		edit   func(*engine.Config)
		field  string // "" when Validate accepts it
		served bool
	}{
		{"no channel", func(*engine.Config) {}, "", true},
		{"no channel, sim named", func(c *engine.Config) { c.DefaultChannel = "sim" }, "", true},
		{"no channel, other default", func(c *engine.Config) { c.DefaultChannel = "acme" }, "DefaultChannel", true},
		{"real channel, its default", func(c *engine.Config) { c.Channels, c.DefaultChannel = acme, "acme" }, "", false},
		{"real channel, no default", func(c *engine.Config) { c.Channels = acme }, "DefaultChannel", false},
		{"real channel, sim default", func(c *engine.Config) { c.Channels, c.DefaultChannel = acme, "sim" }, "DefaultChannel", false},
		{"real channel, routes", func(c *engine.Config) {
			c.Channels, c.ChannelRoutes = acme, []channel.Route{{Channel: "acme", Weight: 1}}
		}, "", false},
		{"real channel, sim enabled", func(c *engine.Config) { c.Channels, c.EnableSimChannel = acme, true }, "", true},
		{"real channel, own gateway not enabled", func(c *engine.Config) {
			c.Channels, c.DefaultChannel, c.Gateway = acme, "acme", sim.New()
		}, "Gateway", false},
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

// TestSimChannelNotBuilt: with a real channel and without EnableSimChannel, no simulated
// gateway is built (Engine.SimGateway is nil) and only the real channel is served.
func TestSimChannelNotBuilt(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.Channels, cfg.DefaultChannel = []channel.Adapter{idleAdapter{name: "acme"}}, "acme"
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if e.SimGateway() != nil || len(e.Payments().Served()) != 1 || e.Payments().Served()[0] != "acme" {
		t.Fatalf("SimGateway %v, served %v; want none and [acme]", e.SimGateway(), e.Payments().Served())
	}
}
