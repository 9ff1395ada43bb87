package sigtest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/internal/sigtest"
)

func TestKnownAnswers(t *testing.T) {
	t.Parallel()
	for _, v := range sigtest.Vectors {
		if got := sigtest.MAC([]byte(v.Secret), v.TS, []byte(v.Body)); got != v.MAC {
			t.Errorf("MAC(%q, %s, %q) = %s, openssl says %s", v.Secret, v.TS, v.Body, got, v.MAC)
		}
	}
}

func TestAuthentic(t *testing.T) {
	t.Parallel()
	v := sigtest.Vectors[0]
	secret, body, now := []byte(v.Secret), []byte(v.Body), time.Unix(1_764_500_000, 0)
	good := "t=1764500000,v1=" + v.MAC
	for _, tc := range []struct {
		header string
		now    time.Time
		want   bool
	}{
		{good, now, true},
		{"t=1764500000, v1=" + strings.ToUpper(v.MAC), now, true},
		{"v1=00,t=1764500000,v1=" + v.MAC, now, true},
		{good, now.Add(5 * time.Minute), true},
		{good, now.Add(5*time.Minute + time.Second), false},
		{good, now.Add(-5*time.Minute - time.Second), false},
		{"t=1764500001,v1=" + v.MAC, now, false},
		{"v1=" + v.MAC, now, false},
		{"t=1764500000", now, false},
		{"", now, false},
	} {
		if got := sigtest.Authentic(secret, tc.header, body, tc.now, 5*time.Minute); got != tc.want {
			t.Errorf("Authentic(%q at %s) = %v, want %v", tc.header, tc.now, got, tc.want)
		}
	}
	if h := sigtest.Header(secret, now, body); h != good {
		t.Errorf("Header = %q, want %q", h, good)
	}
}
