package sqlstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/orderlyhq/orderly/store"
)

const keyColumns = `id, name, scopes, hash, created_at, last_used_at, revoked_at`

var (
	qKeyInsert = sqlText(`INSERT INTO api_keys (` + keyColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	qKeyGet    = sqlText(`SELECT ` + keyColumns + ` FROM api_keys WHERE id = ?`)
	qKeyList   = sqlText(`SELECT ` + keyColumns + ` FROM api_keys ORDER BY id`)
	qKeyRevoke = sqlText(`UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`)
	qKeyTouch  = sqlText(`UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)`)
	qKeyCount  = sqlText(`SELECT COUNT(*) FROM api_keys`)
)

func scanKey(r rowScanner) (*store.APIKey, error) {
	var (
		k                 store.APIKey
		scopes, hash      string
		created           int64
		lastUsed, revoked sql.NullInt64
	)
	if err := r.Scan(&k.ID, &k.Name, &scopes, &hash, &created, &lastUsed, &revoked); err != nil {
		return nil, err
	}
	sum, err := hex.DecodeString(hash)
	if err != nil {
		return nil, fmt.Errorf("api key %s hash: %w", k.ID, err)
	}
	k.Hash, k.Scopes = sum, strings.Split(scopes, ",")
	k.CreatedAt, k.LastUsedAt, k.RevokedAt = fromMS(created), timePtr(lastUsed), timePtr(revoked)
	return &k, nil
}

// KeyInsert implements store.Tx.
func (t *tx) KeyInsert(ctx context.Context, k *store.APIKey) error {
	_, err := t.exec(ctx, "api key "+k.ID, qKeyInsert, k.ID, k.Name, strings.Join(k.Scopes, ","), hex.EncodeToString(k.Hash),
		ms(k.CreatedAt), nullMS(k.LastUsedAt), nullMS(k.RevokedAt))
	return err
}

// KeyGet implements store.Tx.
func (t *tx) KeyGet(ctx context.Context, id string) (*store.APIKey, error) {
	k, err := scanKey(t.queryRow(ctx, qKeyGet, id))
	return k, translate(err, "api key "+id)
}

// KeyList implements store.Tx.
func (t *tx) KeyList(ctx context.Context) ([]*store.APIKey, error) {
	rows, err := t.query(ctx, qKeyList)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []*store.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// KeyRevoke implements store.Tx.
func (t *tx) KeyRevoke(ctx context.Context, id string, now time.Time) (bool, error) {
	n, err := t.exec(ctx, "revoke api key "+id, qKeyRevoke, ms(now), id)
	return n == 1, err
}

// KeyTouch implements store.Tx.
func (t *tx) KeyTouch(ctx context.Context, id string, now time.Time) error {
	_, err := t.exec(ctx, "touch api key "+id, qKeyTouch, ms(now), id, ms(now))
	return err
}

// KeyCount implements store.Tx.
func (t *tx) KeyCount(ctx context.Context) (int64, error) {
	var n int64
	if err := t.queryRow(ctx, qKeyCount).Scan(&n); err != nil {
		return 0, fmt.Errorf("count api keys: %w", err)
	}
	return n, nil
}
