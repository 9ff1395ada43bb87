package sqlstore

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
)

// TestSkipMigrateChecksSchema is `serve --migrate=false`: Open applies nothing and refuses,
// EINVALID, a database without orderly's schema (writing nothing, so that the refusal
// stays the same) and one a migration behind this build; it opens a current one. Without
// the check, Open failed later with a driver error on the first missing table.
func TestSkipMigrateChecksSchema(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var url string
			if dialect == "sqlite" {
				url = filepath.Join(t.TempDir(), "shop.db")
				if err := os.WriteFile(url, nil, 0o600); err != nil { // exists, empty
					t.Fatal(err)
				}
			} else {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			skip := Config{URL: url, SkipMigrate: true}
			for range 2 { // the first refusal created nothing the second would see
				db, err := Open(ctx, skip)
				if err == nil {
					_ = db.Close()
					t.Fatal("SkipMigrate opened a database without orderly's schema")
				}
				if orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), "no orderly schema") ||
					!strings.Contains(err.Error(), "orderly migrate") {
					t.Fatalf("SkipMigrate on an empty database: %v, want EINVALID naming no orderly schema and `orderly migrate`", err)
				}
			}

			db, err := Open(ctx, Config{URL: url}) // migrates
			if err != nil {
				t.Fatal(err)
			}
			var last int64
			if err := db.writer.QueryRowContext(ctx, "SELECT MAX(version_id) FROM "+goose.DefaultTablename).Scan(&last); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			if db, err = Open(ctx, skip); err != nil {
				t.Fatalf("SkipMigrate on a current schema: %v", err)
			}
			// One migration behind: the version row of the last one gone.
			var prev int64
			if _, err := db.writer.ExecContext(ctx, "DELETE FROM "+goose.DefaultTablename+" WHERE version_id = "+strconv.FormatInt(last, 10)); err != nil {
				t.Fatal(err)
			}
			if err := db.writer.QueryRowContext(ctx, "SELECT MAX(version_id) FROM "+goose.DefaultTablename).Scan(&prev); err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
			_, err = Open(ctx, skip)
			want := fmt.Sprintf("at migration %d, this build needs %d", prev, last)
			if orderly.ErrorCode(err) != orderly.EINVALID || err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SkipMigrate a migration behind: %v, want EINVALID %q", err, want)
			}
		})
	}
}
