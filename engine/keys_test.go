package engine_test

import (
	"net"
	"testing"

	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
)

// TestListenAddr: an open API (no admin token, no key) listens on 127.0.0.1 at the port
// asked for; one that needs a token listens where it was asked.
func TestListenAddr(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr string
		open bool
		want string
	}{
		{":8080", true, "127.0.0.1:8080"},
		{"0.0.0.0:9000", true, "127.0.0.1:9000"},
		{"[::]:8080", true, "127.0.0.1:8080"},
		{"127.0.0.1:0", true, "127.0.0.1:0"},
		{":8080", false, ":8080"},
		{"10.1.2.3:8080", false, "10.1.2.3:8080"},
	} {
		if got := engine.ListenAddr(c.addr, c.open); got != c.want {
			t.Errorf("ListenAddr(%q, open %v) = %q, want %q", c.addr, c.open, got, c.want)
		}
	}
}

// TestLoopbackWhenOpen: with LoopbackWhenOpen and no token or key, Start listens on
// 127.0.0.1 although Addr names another address; once a key exists, on Addr itself.
func TestLoopbackWhenOpen(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	// [::1] stands for an address other than 127.0.0.1 that the test may bind.
	probe, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback to stand for another address: %v", err)
	}
	_ = probe.Close()
	cfg.Addr, cfg.LoopbackWhenOpen = "[::1]:0", true
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(e.Addr())
	if host != "127.0.0.1" {
		t.Errorf("open API listens on %s, want 127.0.0.1", e.Addr())
	}
	if _, _, err := e.Keys().Create(t.Context(), "app", []string{"buyer"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	e2, err := engine.Open(t.Context(), cfg, features.All()...) // the same database, now with a key
	if err != nil {
		t.Fatal(err)
	}
	if err := e2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e2.Close(t.Context()) }()
	if on, err := e2.AuthRequired(t.Context()); err != nil || !on {
		t.Errorf("AuthRequired with a key = %v, %v; want true", on, err)
	}
	if host, _, _ := net.SplitHostPort(e2.Addr()); host != "::1" {
		t.Errorf("API with a key listens on %s, want [::1] (the address asked for)", e2.Addr())
	}
}
