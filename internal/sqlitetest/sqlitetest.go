// Package sqlitetest gives tests fresh SQLite databases that are already migrated: the
// schema is migrated once per test binary and each database is a copy of that file, so a
// test pays a file write instead of the migrations (about 25 ms each).
package sqlitetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/orderlyhq/orderly/store/sqlstore"
)

var template struct {
	once  sync.Once
	image []byte
	err   error
}

// Path returns the path of a new SQLite database file in t.TempDir(), migrated to the
// latest schema and holding no rows. It fails t when the template could not be built.
func Path(t testing.TB) string {
	t.Helper()
	template.once.Do(func() { template.image, template.err = build() })
	if template.err != nil {
		t.Fatalf("sqlitetest: migrated template: %v", template.err)
	}
	path := filepath.Join(t.TempDir(), "orderly.db")
	if err := os.WriteFile(path, template.image, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// build migrates a database in a directory of its own and returns its file, which holds
// everything once the store is closed (the last connection checkpoints the write-ahead log).
func build() ([]byte, error) {
	dir, err := os.MkdirTemp("", "orderly-sqlitetest-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "template.db")
	db, err := sqlstore.Open(context.Background(), sqlstore.Config{URL: path})
	if err != nil {
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		return nil, errors.New("the write-ahead log was not checkpointed at close")
	}
	return os.ReadFile(path) //nolint:gosec // G304: the file this function just created
}
