package apikey_test

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/apikey"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// open returns a service over a fresh SQLite file, its path and its clock.
func open(t *testing.T) (*apikey.Service, string, *clock) {
	t.Helper()
	path := sqlitetest.Path(t)
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	c := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	svc, err := apikey.New(apikey.Config{Store: db, Now: c.Now, CacheTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return svc, path, c
}

var keyShape = regexp.MustCompile(`^ok_([a-z2-7]{16})_([a-z2-7]{52})$`)

func TestCreateAuthenticate(t *testing.T) {
	t.Parallel()
	svc, _, _ := open(t)
	k, key, err := svc.Create(t.Context(), "  shop backend ", []string{"merchant", "buyer", "buyer"})
	if err != nil {
		t.Fatal(err)
	}
	m := keyShape.FindStringSubmatch(key)
	if m == nil || m[1] != k.ID {
		t.Fatalf("key %q does not read ok_<id>_<secret> with id %s", key, k.ID)
	}
	if k.Name != "shop backend" || !slices.Equal(k.Scopes, []string{"buyer", "merchant"}) {
		t.Errorf("created %+v, want name trimmed and scopes buyer, merchant", k)
	}
	got, err := svc.Authenticate(t.Context(), key)
	if err != nil || got.ID != k.ID || !slices.Equal(got.Scopes, []string{"buyer", "merchant"}) {
		t.Fatalf("Authenticate = %+v, %v; want key %s", got, err, k.ID)
	}
	for _, bad := range []string{"", "ok_", "Bearer " + key, key + "x", strings.Replace(key, m[2], strings.Repeat("a", 52), 1),
		"ok_" + strings.Repeat("a", 16) + "_" + m[2], "xx_" + m[1] + "_" + m[2]} {
		if _, err := svc.Authenticate(t.Context(), bad); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
			t.Errorf("Authenticate(%q) = %v, want EUNAUTHORIZED", bad, err)
		}
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	t.Parallel()
	svc, _, _ := open(t)
	for _, c := range []struct {
		name   string
		scopes []string
	}{
		{"ok", nil},
		{"ok", []string{"owner"}},
		{"", []string{"buyer"}},
		{"tab\there", []string{"buyer"}},
		{strings.Repeat("n", 257), []string{"buyer"}},
	} {
		if _, _, err := svc.Create(t.Context(), c.name, c.scopes); orderly.ErrorCode(err) != orderly.EINVALID {
			t.Errorf("Create(%q, %v) = %v, want EINVALID", c.name, c.scopes, err)
		}
	}
	if on, err := svc.Enabled(t.Context()); err != nil || on {
		t.Errorf("Enabled after refused creates = %v, %v; want false (nothing written)", on, err)
	}
}

// TestHashedAtRest reads the database row itself: it holds the SHA-256 digest of the
// secret, and the secret appears in no column.
func TestHashedAtRest(t *testing.T) {
	t.Parallel()
	svc, path, _ := open(t)
	k, key, err := svc.Create(t.Context(), "ops", []string{"admin"})
	if err != nil {
		t.Fatal(err)
	}
	secret := keyShape.FindStringSubmatch(key)[2]
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var id, name, scopes, hash string
	var created int64
	if err := raw.QueryRowContext(t.Context(), `SELECT id, name, scopes, hash, created_at FROM api_keys`).Scan(&id, &name, &scopes, &hash, &created); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(secret))
	if hash != hex.EncodeToString(sum[:]) {
		t.Errorf("stored hash %s, want the SHA-256 of the secret", hash)
	}
	for _, col := range []string{id, name, scopes, hash} {
		if strings.Contains(col, secret) || strings.Contains(col, key) {
			t.Errorf("column value %q holds the secret", col)
		}
	}
	if id != k.ID || scopes != "admin" || created != time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli() {
		t.Errorf("row = %s %s %d, want %s admin and the creation time", id, scopes, created, k.ID)
	}
	list, err := svc.List(t.Context())
	if err != nil || len(list) != 1 || list[0].Hash != nil {
		t.Errorf("List = %+v, %v; want one key without its digest", list, err)
	}
}

// TestRevokeWithinTTL: another instance (a second service over the same database) that
// has the key cached keeps taking it until its cache entry is CacheTTL old, then refuses
// it; the revoking instance refuses it at once.
func TestRevokeWithinTTL(t *testing.T) {
	t.Parallel()
	svc, path, c := open(t)
	db2, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close() })
	other, _ := apikey.New(apikey.Config{Store: db2, Now: c.Now, CacheTTL: 5 * time.Second})
	k, key, err := svc.Create(t.Context(), "buyer app", []string{"buyer"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*apikey.Service{svc, other} {
		if _, err := s.Authenticate(t.Context(), key); err != nil {
			t.Fatalf("Authenticate before revoke: %v", err)
		}
	}
	c.Add(time.Second)
	r, err := svc.Revoke(t.Context(), k.ID)
	if err != nil || r.RevokedAt == nil || !r.RevokedAt.Equal(c.Now()) {
		t.Fatalf("Revoke = %+v, %v; want revoked_at %v", r, err, c.Now())
	}
	if _, err := svc.Authenticate(t.Context(), key); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED {
		t.Errorf("revoking instance: Authenticate = %v, want EUNAUTHORIZED at once", err)
	}
	c.Add(3900 * time.Millisecond) // 4.9 s after the other instance read the key
	if _, err := other.Authenticate(t.Context(), key); err != nil {
		t.Errorf("other instance 4.9 s after its read: %v, want the cached key (inside the TTL)", err)
	}
	c.Add(100 * time.Millisecond) // 5 s: the entry is stale
	if _, err := other.Authenticate(t.Context(), key); orderly.ErrorCode(err) != orderly.EUNAUTHORIZED ||
		!strings.Contains(err.Error(), "revoked") {
		t.Errorf("other instance 5 s after its read: %v, want EUNAUTHORIZED (revoked)", err)
	}
	if _, err := svc.Revoke(t.Context(), "nope"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("Revoke of a missing key = %v, want ENOTFOUND", err)
	}
	again, err := svc.Revoke(t.Context(), k.ID)
	if err != nil || !again.RevokedAt.Equal(*r.RevokedAt) {
		t.Errorf("second Revoke = %+v, %v; want the first revoked_at kept", again, err)
	}
}

// TestEnabled: no key → false, re-read once the TTL passed; a key created elsewhere turns
// it on within the TTL; revoking every key leaves it on.
func TestEnabled(t *testing.T) {
	t.Parallel()
	svc, path, c := open(t)
	db2, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close() })
	cli, _ := apikey.New(apikey.Config{Store: db2, Now: c.Now})
	if on, err := svc.Enabled(t.Context()); err != nil || on {
		t.Fatalf("Enabled with no key = %v, %v", on, err)
	}
	k, _, err := cli.Create(t.Context(), "first", []string{"buyer"})
	if err != nil {
		t.Fatal(err)
	}
	if on, _ := svc.Enabled(t.Context()); on {
		t.Error("Enabled turned on before the TTL passed: the count is not cached")
	}
	c.Add(5 * time.Second)
	if on, _ := svc.Enabled(t.Context()); !on {
		t.Error("Enabled still off 5 s after a key was created")
	}
	if _, err := cli.Revoke(t.Context(), k.ID); err != nil {
		t.Fatal(err)
	}
	c.Add(time.Minute)
	if on, _ := svc.Enabled(t.Context()); !on {
		t.Error("Enabled off after every key was revoked: revoking must not open the API")
	}
}

// TestLastUsed: authenticating records last_used_at, once per cache refresh.
func TestLastUsed(t *testing.T) {
	t.Parallel()
	svc, _, c := open(t)
	k, key, _ := svc.Create(t.Context(), "app", []string{"buyer"})
	c.Add(time.Minute)
	if _, err := svc.Authenticate(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	list, _ := svc.List(t.Context())
	if len(list) != 1 || list[0].ID != k.ID || list[0].LastUsedAt == nil || !list[0].LastUsedAt.Equal(c.Now()) {
		t.Errorf("last_used_at = %+v, want %v", list, c.Now())
	}
}
