package store

import (
	"context"
	"time"
)

// KeyTx holds the queries of API keys (package apikey). It is part of Tx. A key's secret is
// never stored: only its SHA-256 digest (Hash).
type KeyTx interface {
	// KeyInsert writes a key. ECONFLICT when the id exists.
	KeyInsert(ctx context.Context, k *APIKey) error
	// KeyGet returns a key with its hash, revoked or not; ENOTFOUND if there is none.
	KeyGet(ctx context.Context, id string) (*APIKey, error)
	// KeyList returns every key (revoked ones too), by id, with their hashes.
	KeyList(ctx context.Context) ([]*APIKey, error)
	// KeyRevoke sets revoked_at to now on a key that is not revoked and reports whether it
	// changed (false: revoked already, or no such key).
	KeyRevoke(ctx context.Context, id string, now time.Time) (bool, error)
	// KeyTouch sets last_used_at to now unless it is already at or after now.
	KeyTouch(ctx context.Context, id string, now time.Time) error
	// KeyCount returns the number of keys ever created, revoked ones included.
	KeyCount(ctx context.Context) (int64, error)
}

// APIKey is one API key as stored: the id (the public part of the key, apikey.Prefix +
// id + "_" + secret), a name for people, the scopes it grants, the SHA-256 digest of its
// secret and its life times (UTC, milliseconds).
type APIKey struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"` // "buyer", "merchant", "admin"
	Hash       []byte     `json:"-"`      // SHA-256 of the secret, 32 bytes
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"` // last authenticated use, per cache refresh
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}
