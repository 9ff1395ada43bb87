// Package apikey manages the API keys of the HTTP API: keys with scopes (buyer, merchant,
// admin), hashed at rest, created, listed and revoked by `orderly keys`, and authenticated
// per request through a short cache (docs/operations/api-keys.md).
//
// A key reads "ok_<id>_<secret>": the id (16 lower-case base32 letters and digits) names
// the row, so a request is looked up by id, never by scanning; the secret (32 random bytes,
// 52 base32 characters) is shown once, when the key is created, and only its SHA-256
// digest is stored. A high-entropy random secret needs no slow password hash: SHA-256 of
// it cannot be reversed or guessed, and the digests are compared in constant time.
package apikey

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Scopes of a key. A route names the scopes that may call it (docs/operations/api-keys.md, the
// route table); a key may hold several. The admin token of `serve` holds all three.
const (
	ScopeBuyer    = "buyer"    // buyer-facing order actions: create, read, cancel, pay, list a user's orders, groups
	ScopeMerchant = "merchant" // stock, coupons, deals, shipping and other order events, refunds, wallet credits
	ScopeAdmin    = "admin"    // the operator routes under /v1/admin
)

// Scopes are the scopes a key may hold, in the order they are listed.
var Scopes = []string{ScopeBuyer, ScopeMerchant, ScopeAdmin}

// Prefix starts every key; it makes a leaked key easy to find by secret scanners.
const Prefix = "ok_"

// DefaultCacheTTL is how long an instance trusts what it read of a key: a revoked key is
// refused by every instance at most this long after the revoke (5 s).
const DefaultCacheTTL = 5 * time.Second

// maxCached bounds the cache; past it the cache is emptied (unknown ids are cached too, so
// a flood of made-up keys cannot grow it without bound).
const maxCached = 10_000

// idBytes and secretBytes are the random bytes of a key's id (80 bits) and secret (256 bits).
const (
	idBytes     = 10
	secretBytes = 32
)

// encoding is lower-case base32 without padding: letters and digits only, no "_".
var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Config configures a Service.
type Config struct {
	Store store.Store // required
	// CacheTTL is how long a key read from the store (or its absence) is trusted;
	// DefaultCacheTTL (5 s) when 0.
	CacheTTL time.Duration
	// Now is the clock of created_at, revoked_at, last_used_at and the cache; time.Now
	// when nil.
	Now    func() time.Time
	Logger *slog.Logger // slog.Default() when nil
}

// Service creates, lists, revokes and authenticates API keys. It is safe for concurrent use.
type Service struct {
	st     store.Store
	ttl    time.Duration
	now    func() time.Time
	logger *slog.Logger

	mu      sync.Mutex
	cache   map[string]cached
	enabled bool      // a key exists: once true, it stays true (keys are revoked, never deleted)
	checked time.Time // when enabled was last read from the store
}

// cached is what the cache knows of one id: the key, or nil when the store has none.
type cached struct {
	key *store.APIKey
	at  time.Time
}

// New returns a Service. Errors: no Store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("apikey: Config.Store is nil")
	}
	s := &Service{st: cfg.Store, ttl: cfg.CacheTTL, now: cfg.Now, logger: cfg.Logger, cache: map[string]cached{}}
	if s.ttl <= 0 {
		s.ttl = DefaultCacheTTL
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s, nil
}

// Create makes a key named name with scopes (each one of Scopes; duplicates dropped, kept
// in the order of Scopes) and returns it and the key to hand to its user, which is shown
// only here. Errors: EINVALID for no scope, an unknown scope, or a name that is empty,
// over 256 bytes or has control characters.
func (s *Service) Create(ctx context.Context, name string, scopes []string) (*store.APIKey, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 256 || strings.ContainsFunc(name, unicode.IsControl) {
		return nil, "", orderly.Errorf(orderly.EINVALID, "a key's name must be 1 to 256 bytes without control characters")
	}
	if len(scopes) == 0 {
		return nil, "", orderly.Errorf(orderly.EINVALID, "a key needs at least one scope: %s", strings.Join(Scopes, ", "))
	}
	var ordered []string
	for _, sc := range scopes {
		if !slices.Contains(Scopes, sc) {
			return nil, "", orderly.Errorf(orderly.EINVALID, "unknown scope %q: use %s", sc, strings.Join(Scopes, ", "))
		}
	}
	for _, sc := range Scopes {
		if slices.Contains(scopes, sc) {
			ordered = append(ordered, sc)
		}
	}
	id, secret := random(idBytes), random(secretBytes)
	sum := sha256.Sum256([]byte(secret))
	k := &store.APIKey{ID: id, Name: name, Scopes: ordered, Hash: sum[:], CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	if err := s.st.InTx(ctx, func(tx store.Tx) error { return tx.KeyInsert(ctx, k) }); err != nil {
		return nil, "", fmt.Errorf("apikey: create: %w", err)
	}
	return k, Prefix + id + "_" + secret, nil
}

// List returns every key, revoked ones included, by id; their digests are not shown
// (Hash is nil).
func (s *Service) List(ctx context.Context) ([]*store.APIKey, error) {
	var keys []*store.APIKey
	if err := s.st.Read(ctx, func(tx store.Tx) error {
		var err error
		keys, err = tx.KeyList(ctx)
		return err
	}); err != nil {
		return nil, fmt.Errorf("apikey: list: %w", err)
	}
	for _, k := range keys {
		k.Hash = nil
	}
	return keys, nil
}

// Revoke revokes a key for good: every instance refuses it within the cache TTL. It
// returns the key; revoking a revoked key changes nothing (its first revoked_at stays).
// Errors: ENOTFOUND.
func (s *Service) Revoke(ctx context.Context, id string) (*store.APIKey, error) {
	var k *store.APIKey
	if err := s.st.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.KeyRevoke(ctx, id, s.now().UTC()); err != nil {
			return err
		}
		var err error
		k, err = tx.KeyGet(ctx, id)
		return err
	}); err != nil {
		return nil, fmt.Errorf("apikey: revoke: %w", err)
	}
	s.mu.Lock()
	delete(s.cache, id) // this instance at once; the others within the TTL
	s.mu.Unlock()
	k.Hash = nil
	return k, nil
}

// Authenticate returns the key that key (as presented: "ok_<id>_<secret>") is, with its
// scopes. Errors: EUNAUTHORIZED for a key of another shape, an unknown id, a wrong secret
// or a revoked key (the message says which, without echoing the key); a store error when
// the key could not be read.
func (s *Service) Authenticate(ctx context.Context, key string) (*store.APIKey, error) {
	rest, ok := strings.CutPrefix(key, Prefix)
	id, secret, ok2 := strings.Cut(rest, "_")
	if !ok || !ok2 || id == "" || secret == "" {
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "not an API key: keys read %s<id>_<secret>", Prefix)
	}
	k, err := s.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(secret))
	switch {
	case k == nil || subtle.ConstantTimeCompare(sum[:], k.Hash) != 1:
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "unknown API key")
	case k.RevokedAt != nil:
		return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "API key %s was revoked at %s", k.ID, k.RevokedAt.Format(time.RFC3339))
	}
	return k, nil
}

// lookup returns the key with id from the cache, or from the store (nil when there is
// none) when the cache has no entry younger than the TTL. A key read from the store that
// is not revoked gets its last_used_at set (so last_used_at is exact to the TTL); a failure
// to write it is logged, not returned.
func (s *Service) lookup(ctx context.Context, id string) (*store.APIKey, error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[id]
	s.mu.Unlock()
	if ok && now.Sub(c.at) < s.ttl {
		return c.key, nil
	}
	var k *store.APIKey
	err := s.st.Read(ctx, func(tx store.Tx) error {
		var err error
		k, err = tx.KeyGet(ctx, id)
		return err
	})
	switch {
	case orderly.ErrorCode(err) == orderly.ENOTFOUND:
		k = nil
	case err != nil:
		return nil, fmt.Errorf("apikey: read key %s: %w", id, err)
	}
	s.mu.Lock()
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[id] = cached{key: k, at: now}
	s.mu.Unlock()
	if k != nil && k.RevokedAt == nil {
		if err := s.st.InTx(ctx, func(tx store.Tx) error { return tx.KeyTouch(ctx, id, now.UTC()) }); err != nil {
			s.logger.WarnContext(ctx, "record the use of an API key", "key_id", id, "error", err)
		}
	}
	return k, nil
}

// Enabled reports whether any key was ever created (revoked keys count: revoking every
// key does not open the API). It reads the store at most once per TTL while no key
// exists, and never again once one does.
func (s *Service) Enabled(ctx context.Context) (bool, error) {
	now := s.now()
	s.mu.Lock()
	on, fresh := s.enabled, !s.checked.IsZero() && now.Sub(s.checked) < s.ttl
	s.mu.Unlock()
	if on || fresh {
		return on, nil
	}
	var n int64
	if err := s.st.Read(ctx, func(tx store.Tx) error {
		var err error
		n, err = tx.KeyCount(ctx)
		return err
	}); err != nil {
		return false, fmt.Errorf("apikey: count keys: %w", err)
	}
	s.mu.Lock()
	s.enabled, s.checked = n > 0, now
	s.mu.Unlock()
	return n > 0, nil
}

// random returns n random bytes in the key alphabet.
func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return encoding.EncodeToString(b)
}
