package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/client"
)

func TestVerifySignature(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"e1","topic":"order.paid"}`)
	good := client.Sign("whsec_new", body, now)
	old := client.Sign("whsec_old", body, now)
	tests := []struct {
		name, header string
		body         []byte
		now          time.Time
		ok           bool
	}{
		{"signed", good, body, now, true},
		{"within the tolerance", good, body, now.Add(5 * time.Minute), true},
		{"rolled secret: the new one among two", old + ",v1=" + good[len("t=1800000000,v1="):], body, now, true},
		{"other body", good, []byte(`{"id":"e1","topic":"order.closed"}`), now, false},
		{"other secret", old, body, now, false},
		{"late", good, body, now.Add(5*time.Minute + time.Second), false},
		{"early", good, body, now.Add(-5*time.Minute - time.Second), false},
		{"no timestamp", good[len("t=1800000000,"):], body, now, false},
		{"no signature", "t=1800000000", body, now, false},
		{"empty", "", body, now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := client.VerifySignature("whsec_new", tt.header, tt.body, tt.now, 5*time.Minute)
			if (err == nil) != tt.ok || err != nil && !errors.Is(err, client.ErrSignature) {
				t.Fatalf("VerifySignature(%q) = %v, want ok=%v", tt.header, err, tt.ok)
			}
		})
	}
}
