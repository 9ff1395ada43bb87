package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run with violations prints the requests its instances answered 500, so that a CI log
// names the server's error behind a client's "500 internal".
func TestWriteFailedRequests(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "instance-1.log")
	two := filepath.Join(dir, "instance-2.log")
	failed := `time=2026-12-04T01:29:13.355Z level=ERROR msg="http request failed" method=POST path=/v1/payments/callback err="commit: conn closed"`
	write := func(path string, lines ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(one,
		`time=2026-12-04T01:29:09.488Z level=INFO msg="orderly serving"`,
		`time=2026-12-04T01:29:13.354Z level=WARN msg="http request answered 503 unavailable (retry later)" path=/v1/payments/callback`,
		failed)
	write(two, failed, failed, failed)

	var out strings.Builder
	writeFailedRequests(&out, []string{one, two, filepath.Join(dir, "missing.log")}, 10)
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != 5 {
		t.Fatalf("got %d lines, want 4 failed requests and the missing log:\n%s", len(got), out.String())
	}
	if got[0] != "instance-1.log: "+failed || got[3] != "instance-2.log: "+failed {
		t.Errorf("lines not named by their log:\n%s", out.String())
	}
	if !strings.Contains(got[4], "missing.log") {
		t.Errorf("last line = %q, want the missing log's error", got[4])
	}

	out.Reset()
	writeFailedRequests(&out, []string{one, two}, 2)
	got = strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != 3 || !strings.HasPrefix(got[2], "orderly simulate: more requests answered 500 in ") {
		t.Errorf("with max 2: got\n%s\nwant 2 lines and the note that there are more", out.String())
	}
}
