package main

import (
	"strings"
	"testing"
)

// TestServeFlagNames: serve refuses what engine.Config.Validate refuses, naming the flags
// instead of the Config fields; among them the cap of --payment-timeout (7 days, the cap of
// the per-order payment_timeout_seconds): 2562047h used to be accepted.
func TestServeFlagNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--payment-timeout", "2562047h"}, "--payment-timeout must be at most 168h0m0s (7 days, the cap of payment_timeout_seconds), not 2562047h0m0s"},
		{[]string{"--payment-timeout", "168h0m1s"}, "--payment-timeout must be at most 168h0m0s (7 days, the cap of payment_timeout_seconds), not 168h0m1s"},
		{[]string{"--request-timeout", "-1s"}, "--request-timeout must not be negative, got -1s"},
		{[]string{"--close-batch-size", "-1"}, "--close-batch-size must not be negative, got -1"},
		{[]string{"--outbox-max-attempts", "-3"}, "--outbox-max-attempts must not be negative, got -3"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"serve", "--addr", "127.0.0.1:0", "--database-url", t.TempDir() + "/x.db"}, tc.args...)...)
		if code != exitUsage || stdout != "" || stderr != "orderly: "+tc.want+"\n" {
			t.Errorf("serve %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
	}
}
