package sqlstore

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
			url := freshURL(t, dialect)
			if dialect == "sqlite" {
				if err := os.WriteFile(url, nil, 0o600); err != nil { // exists, empty
					t.Fatal(err)
				}
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
			last := lastVersion(t, db)
			_ = db.Close()
			if db, err = Open(ctx, skip); err != nil {
				t.Fatalf("SkipMigrate on a current schema: %v", err)
			}
			// Versions still in the legacy table (not renamed without a migration): current.
			renameTableSQL(t, db, VersionTable, "goose_db_version")
			if legacy, err := Open(ctx, skip); err != nil {
				t.Fatalf("SkipMigrate on a current schema whose versions are in goose_db_version: %v", err)
			} else {
				_ = legacy.Close()
			}
			renameTableSQL(t, db, "goose_db_version", VersionTable)
			// One migration behind: the version row of the last one gone.
			if _, err := db.writer.ExecContext(ctx, "DELETE FROM "+VersionTable+" WHERE version_id = "+strconv.FormatInt(last, 10)); err != nil {
				t.Fatal(err)
			}
			prev := lastVersion(t, db)
			_ = db.Close()
			_, err = Open(ctx, skip)
			want := fmt.Sprintf("at migration %d, this build needs %d", prev, last)
			if orderly.ErrorCode(err) != orderly.EINVALID || err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("SkipMigrate a migration behind: %v, want EINVALID %q", err, want)
			}
		})
	}
}

// TestVersionTableRenamed is a database migrated when the version table had goose's default
// name (goose_db_version, which a host's own goose migrations in the same schema would
// share): Open renames it to VersionTable and applies nothing twice (a migration run again
// would fail on its CREATE TABLE).
func TestVersionTableRenamed(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := freshURL(t, dialect)
			db, err := Open(ctx, Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			last := lastVersion(t, db)
			renameTableSQL(t, db, VersionTable, "goose_db_version")
			_ = db.Close()

			if db, err = Open(ctx, Config{URL: url}); err != nil {
				t.Fatalf("open a database whose versions are in goose_db_version: %v", err)
			}
			defer db.Close()
			if now := lastVersion(t, db); now != last {
				t.Errorf("%s after the rename: version %d, want %d", VersionTable, now, last)
			}
			if ok, err := probeTable(ctx, db.writer, db.d, "goose_db_version"); err != nil || ok {
				t.Errorf("goose_db_version still exists beside %s (%v)", VersionTable, err)
			}
		})
	}
}

// TestMigrationsExported checks the migrations a deployment applies with its own tooling:
// per dialect, goose files at the root starting with 00001_init.sql, the same versions in
// every dialect, and a clear error for another dialect.
func TestMigrationsExported(t *testing.T) {
	t.Parallel()
	var first []string
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		fsys, err := Migrations(dialect)
		if err != nil {
			t.Fatal(err)
		}
		names, err := fs.Glob(fsys, "*.sql")
		if err != nil || len(names) < 2 || names[0] != "00001_init.sql" {
			t.Fatalf("%s: migrations %v (%v), want 00001_init.sql first", dialect, names, err)
		}
		versions := make([]string, len(names))
		for i, n := range names {
			versions[i] = n[:5]
		}
		if first == nil {
			first = versions
		} else if !slices.Equal(versions, first) {
			t.Errorf("%s: versions %v, want the sqlite ones %v", dialect, versions, first)
		}
	}
	if _, err := Migrations("oracle"); err == nil || !strings.Contains(err.Error(), `"oracle"`) {
		t.Errorf("Migrations(oracle) = %v, want an error naming it", err)
	}
}

// TestMigrationStatus is `orderly migrate status`: every migration of this build, none
// applied on a database without orderly's schema (and no SQLite file made), all after a
// migration, the last pending once its version row is gone, and the same through the
// legacy version table goose_db_version.
func TestMigrationStatus(t *testing.T) {
	t.Parallel()
	want, err := Migrations("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(want, "*.sql")
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			url := freshURL(t, dialect)
			check := func(when string, applied int) {
				t.Helper()
				ms, err := MigrationStatus(ctx, url)
				if err != nil {
					t.Fatalf("%s: %v", when, err)
				}
				if len(ms) != len(names) {
					t.Fatalf("%s: %d migrations, want %d", when, len(ms), len(names))
				}
				for i, m := range ms {
					if m.Name != names[i] || m.Applied != (i < applied) {
						t.Errorf("%s: migration %d = %+v, want %s applied %t", when, i, m, names[i], i < applied)
					}
				}
			}
			check("before any migration", 0)
			if dialect == "sqlite" {
				if _, err := os.Stat(url); err == nil {
					t.Error("MigrationStatus created the SQLite file")
				}
			}
			db, err := Open(ctx, Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			check("migrated", len(names))
			last := lastVersion(t, db)
			if _, err := db.writer.ExecContext(ctx, "DELETE FROM "+VersionTable+" WHERE version_id = "+strconv.FormatInt(last, 10)); err != nil {
				t.Fatal(err)
			}
			check("the last version row gone", len(names)-1)
			renameTableSQL(t, db, VersionTable, "goose_db_version")
			check("versions in goose_db_version", len(names)-1)
		})
	}
}

// freshURL returns the URL of an empty database of dialect: a SQLite file path not created
// yet, or a fresh PostgreSQL schema or MySQL database.
func freshURL(t *testing.T, dialect string) string {
	t.Helper()
	if dialect == "sqlite" {
		return filepath.Join(t.TempDir(), "shop.db")
	}
	return testdb.Fresh(t, testdb.URL(t, dialect))
}

// lastVersion returns the highest migration version recorded in db's VersionTable.
func lastVersion(t *testing.T, db *DB) int64 {
	t.Helper()
	var v int64
	if err := db.writer.QueryRowContext(t.Context(), "SELECT MAX(version_id) FROM "+VersionTable).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// renameTableSQL renames a table with plain SQL (not DB.renameTable, which the tests check).
func renameTableSQL(t *testing.T, db *DB, from, to string) {
	t.Helper()
	if _, err := db.writer.ExecContext(t.Context(), "ALTER TABLE "+from+" RENAME TO "+to); err != nil {
		t.Fatal(err)
	}
}
