package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPaymentTimeoutCap checks that `serve --payment-timeout` has the cap of the per-order
// payment_timeout_seconds (7 days): 2562047h used to be accepted.
func TestPaymentTimeoutCap(t *testing.T) {
	for _, d := range []time.Duration{2562047 * time.Hour, 7*24*time.Hour + time.Second} {
		_, err := OpenServer(context.Background(), ServerConfig{
			Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db"), CallbackSecret: []byte("s"), PaymentTimeout: d,
		})
		if err == nil || !strings.Contains(err.Error(), "--payment-timeout must be at most 168h0m0s") {
			t.Errorf("--payment-timeout %s: error %v, want the 7-day cap", d, err)
		}
	}
	_, err := OpenServer(context.Background(), ServerConfig{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db"), CallbackSecret: []byte("s"), RequestTimeout: -time.Second,
	})
	if err == nil || !strings.Contains(err.Error(), "--request-timeout") {
		t.Errorf("negative --request-timeout: %v", err)
	}
}
