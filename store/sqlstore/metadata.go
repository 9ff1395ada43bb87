package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/orderlyhq/orderly"
)

// metadataTables maps each kind of object with metadata to its table (a trip's is its
// order's row).
var metadataTables = map[orderly.MetadataOf]string{
	orderly.MetadataOfOrder: "orders", orderly.MetadataOfPayment: "payments",
	orderly.MetadataOfRefund: "refunds", orderly.MetadataOfGroup: "deal_groups",
}

// qMetadataLock and qMetadataSet hold one statement per table of metadataTables.
var qMetadataLock, qMetadataSet = map[orderly.MetadataOf]*query{}, map[orderly.MetadataOf]*query{}

func init() {
	for of, table := range metadataTables {
		qMetadataLock[of] = newQuery(func(d *dialect) string {
			return `SELECT metadata FROM ` + table + ` WHERE id = ?` + d.lockRows
		})
		qMetadataSet[of] = sqlText(`UPDATE ` + table + ` SET metadata = ? WHERE id = ?`)
	}
}

// MetadataLock implements store.Tx.
func (t *tx) MetadataLock(ctx context.Context, of orderly.MetadataOf, id string) (orderly.Metadata, error) {
	q, ok := qMetadataLock[of]
	if !ok {
		return nil, fmt.Errorf("metadata of %q: no such kind of object", of)
	}
	var raw sql.NullString
	if err := t.queryRow(ctx, q, id).Scan(&raw); err != nil {
		return nil, translate(err, string(of)+" "+id)
	}
	return decodeMetadata(raw, string(of)+" "+id)
}

// MetadataSet implements store.Tx.
func (t *tx) MetadataSet(ctx context.Context, of orderly.MetadataOf, id string, m orderly.Metadata) error {
	q, ok := qMetadataSet[of]
	if !ok {
		return fmt.Errorf("metadata of %q: no such kind of object", of)
	}
	// No check of the rows changed: MySQL counts an unchanged row as 0, and the caller
	// locked the row (MetadataLock) in this transaction.
	_, err := t.exec(ctx, "metadata of "+string(of)+" "+id, q, encodeMetadata(m), id)
	return err
}

// encodeMetadata is the column value of m: its JSON object, or NULL when m is empty.
func encodeMetadata(m orderly.Metadata) sql.NullString {
	if len(m) == 0 {
		return sql.NullString{}
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return sql.NullString{String: string(b), Valid: true}
}

// decodeMetadata reads a metadata column of the row named what.
func decodeMetadata(raw sql.NullString, what string) (orderly.Metadata, error) {
	if !raw.Valid || raw.String == "" {
		return nil, nil
	}
	var m orderly.Metadata
	if err := json.Unmarshal([]byte(raw.String), &m); err != nil {
		return nil, fmt.Errorf("%s metadata: %w", what, err)
	}
	return m, nil
}
