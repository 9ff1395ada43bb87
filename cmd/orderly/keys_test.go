package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKeysCommand: `keys create` prints the key once, `keys list` shows the key without
// its secret (table and JSON), `keys revoke` sets revoked_at; bad input exits 2, an unknown
// id exits 1.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "keys.db")
	code, stdout, stderr := runCLI(t, "keys", "create", "--database-url", db, "--name", "shop backend", "--scope", "merchant,buyer")
	m := regexp.MustCompile(`(?m)^  (ok_([a-z2-7]{16})_([a-z2-7]{52}))$`).FindStringSubmatch(stdout)
	if code != 0 || m == nil || !strings.Contains(stdout, "scopes buyer,merchant") {
		t.Fatalf("create: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	id, secret := m[2], m[3]

	code, stdout, _ = runCLI(t, "keys", "list", "--database-url", db)
	if code != 0 || !strings.Contains(stdout, id) || !strings.Contains(stdout, "shop backend") || strings.Contains(stdout, secret) {
		t.Errorf("list: exit %d, want the key's id and name and not its secret:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, "keys", "list", "--database-url", db, "--json")
	var keys []map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &keys) != nil || len(keys) != 1 || keys[0]["id"] != id ||
		keys[0]["revoked_at"] != nil || strings.Contains(stdout, secret) {
		t.Errorf("list --json: exit %d\n%s", code, stdout)
	}

	code, stdout, stderr = runCLI(t, "keys", "revoke", "--database-url", db, id)
	if code != 0 || !strings.Contains(stdout, "Revoked key "+id) {
		t.Errorf("revoke: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	_, stdout, _ = runCLI(t, "keys", "list", "--database-url", db, "--json")
	if err := json.Unmarshal([]byte(stdout), &keys); err != nil || len(keys) != 1 || keys[0]["revoked_at"] == nil {
		t.Errorf("list after revoke: %s", stdout)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"keys", "create", "--database-url", db, "--name", "x", "--scope", "owner"}, 2, `unknown scope "owner"`},
		{[]string{"keys", "create", "--database-url", db, "--scope", "buyer"}, 2, "name"},
		{[]string{"keys", "revoke", "--database-url", db}, 2, "one key id"},
		{[]string{"keys", "revoke", "--database-url", db, "nope"}, 1, "not found"},
	} {
		code, stdout, stderr := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) || stdout != "" {
			t.Errorf("%v: exit %d (want %d)\nstdout %s\nstderr %s (want %q)", c.args, code, c.code, stdout, stderr, c.msg)
		}
	}
}
