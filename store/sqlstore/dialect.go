package sqlstore

import (
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"github.com/pressly/goose/v3"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// dialect holds what differs between SQL databases. Queries are written once, with '?'
// placeholders and these fragments, and built per dialect when a DB opens.
type dialect struct {
	name      string
	goose     goose.Dialect
	driver    string               // database/sql driver name
	isolation sql.IsolationLevel   // of write transactions
	unique    func(err error) bool // a unique-key violation
	retry     func(err error) bool // a deadlock or serialization failure: run the transaction again
	// busy reports a lock wait that ended, a busy database or a cancelled statement: the
	// transaction changed nothing and the same request may be sent again (EUNAVAILABLE).
	busy func(err error) bool
	// dollar placeholders ($1, $2, …) instead of '?'.
	dollar bool
	// now selects the database clock as unix milliseconds, truncated.
	now string
	// hostClock: the database's clock is this process's clock. SQLite runs in the process
	// and reads the same realtime clock (gettimeofday, to the millisecond) as time.Now, and
	// WAL mode keeps every process on a SQLite file on one host: tx.Now reads time.Now,
	// the same value without a statement (eight a wallet checkout).
	hostClock bool
	// returning: INSERT … ON CONFLICT DO UPDATE … RETURNING returns the rows it wrote
	// (SQLite 3.35, PostgreSQL; MySQL has no RETURNING).
	returning bool
	// ids and intIDs are subqueries yielding, as column v, the elements of one JSON array
	// parameter (strings, integers): they keep statement texts constant whatever the
	// number of ids, so every statement is prepared once.
	ids, intIDs string
	// lockRows is appended to a SELECT that claims rows; skipLocked to one that claims
	// rows other transactions may be claiming. Empty where the database has one writer.
	lockRows, skipLocked string
	// forceIndex(name) makes a claim scan the named index in order: MySQL otherwise may
	// sort a small table in full and lock every matching row, not just the LIMIT it returns.
	forceIndex func(name string) string
}

var sqliteDialect = &dialect{
	name:   "sqlite",
	goose:  goose.DialectSQLite3,
	driver: "sqlite",
	unique: func(err error) bool {
		var se *sqlite.Error
		return errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
	},
	retry: func(error) bool { return false }, // one writer: no deadlocks
	busy: func(err error) bool {
		// SQLITE_BUSY: another connection (another process) holds the write lock past
		// busy_timeout; SQLITE_LOCKED: a conflict inside this process; SQLITE_INTERRUPT:
		// the statement was interrupted because its context ended. Extended codes keep the
		// primary code in their low byte.
		var se *sqlite.Error
		if !errors.As(err, &se) {
			return false
		}
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT:
			return true
		}
		return false
	},
	// unixepoch('subsec') is the integer millisecond clock divided by 1000.0; ROUND only
	// undoes the float error of that division. tx.Now does not send it (hostClock).
	now:        `SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`,
	hostClock:  true,
	returning:  true,
	ids:        `SELECT value AS v FROM json_each(?)`,
	intIDs:     `SELECT value AS v FROM json_each(?)`,
	forceIndex: func(string) string { return "" },
}

var postgresDialect = &dialect{
	name:      "postgres",
	goose:     goose.DialectPostgres,
	driver:    "pgx",
	isolation: sql.LevelReadCommitted,
	dollar:    true,
	unique: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	},
	retry: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
	},
	busy: func(err error) bool {
		// lock_not_available (lock_timeout, NOWAIT), query_canceled (statement_timeout or
		// a cancel request sent when the context ended), deadlock and serialization
		// failures that outlived the retries.
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			switch pe.Code {
			case "55P03", "57014", "40P01", "40001":
				return true
			}
			return false
		}
		return pgconn.Timeout(err)
	},
	// clock_timestamp() is the time now, not the transaction's start; EXTRACT returns an
	// exact numeric and FLOOR truncates to the millisecond.
	now:        `SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint`,
	returning:  true,
	ids:        `SELECT v FROM jsonb_array_elements_text(?::jsonb) AS t(v)`,
	intIDs:     `SELECT v::bigint FROM jsonb_array_elements_text(?::jsonb) AS t(v)`,
	lockRows:   ` FOR UPDATE`,
	skipLocked: ` FOR UPDATE SKIP LOCKED`,
	forceIndex: func(string) string { return "" },
}

var mysqlDialect = &dialect{
	name:      "mysql",
	goose:     goose.DialectMySQL,
	driver:    "mysql",
	isolation: sql.LevelReadCommitted,
	unique: func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 1062
	},
	retry: func(err error) bool {
		var me *mysql.MySQLError
		// Deadlock only. A lock wait timeout (1205) is not run again: the holder is stalled
		// (stopped, a long transaction), so every run would wait the timeout again while
		// keeping a pool connection; it is answered as EUNAVAILABLE (connlost.go).
		return errors.As(err, &me) && me.Number == 1213
	},
	busy: func(err error) bool {
		// 1205 lock wait timeout, 1213 deadlock (after the retries), 3024 max_execution_time
		// exceeded, 3572 NOWAIT lock, 1317 query interrupted.
		var me *mysql.MySQLError
		if !errors.As(err, &me) {
			return false
		}
		switch me.Number {
		case 1205, 1213, 3024, 3572, 1317:
			return true
		}
		return false
	},
	// UNIX_TIMESTAMP(NOW(3)) is an exact decimal with milliseconds.
	now:        `SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)`,
	ids:        `SELECT v FROM JSON_TABLE(?, '$[*]' COLUMNS (v VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS t`,
	intIDs:     `SELECT v FROM JSON_TABLE(?, '$[*]' COLUMNS (v BIGINT PATH '$')) AS t`,
	lockRows:   ` FOR UPDATE`,
	skipLocked: ` FOR UPDATE SKIP LOCKED`,
	forceIndex: func(name string) string { return " FORCE INDEX (" + name + ")" },
}

// updateByIDs builds an UPDATE of the rows of table whose idCol is in the id list ids (a
// d.ids or d.intIDs subquery), with extra conditions where ("" for none). Where the
// dialect has row locks the rows are taken in id order (send the list in id order too:
// idList). MySQL runs a single-table UPDATE … WHERE id IN (subquery) as a scan of the
// whole table, so there it is a join, which puts the id list before SET: build the
// arguments with byIDsArgs.
func (d *dialect) updateByIDs(table, idCol, ids, set, where string) string {
	return d.updateIDs(table, idCol, ids, set, where, true)
}

// updateLockedByIDs is updateByIDs for rows the transaction has locked already (a locking
// read of the same rows, in id order, just before it): no lock step of its own.
func (d *dialect) updateLockedByIDs(table, idCol, ids, set, where string) string {
	return d.updateIDs(table, idCol, ids, set, where, false)
}

func (d *dialect) updateIDs(table, idCol, ids, set, where string, lock bool) string {
	if d == mysqlDialect {
		q := "UPDATE " + table + " FORCE INDEX (PRIMARY) JOIN (" + ids + ") AS j ON " + table + "." + idCol + " = j.v SET " + set
		if where != "" {
			q += " WHERE " + where
		}
		return q
	}
	if where != "" {
		where = " AND " + where
	}
	if lock && d.lockRows != "" {
		// PostgreSQL: the rows are locked first, in id order (LockRows above the sort), so
		// that two such statements over the same rows take them in one order; the plan of
		// the bare UPDATE (a hash of the list, a scan) took them in any order and they
		// deadlocked (Orders/ListsInAnyOrderDoNotDeadlock).
		return "UPDATE " + table + " SET " + set + " WHERE " + idCol + " IN (SELECT " + idCol + " FROM " + table +
			" WHERE " + idCol + " IN (" + ids + ")" + where + " ORDER BY " + idCol + d.lockRows + ")"
	}
	return "UPDATE " + table + " SET " + set + " WHERE " + idCol + " IN (" + ids + ")" + where
}

// selectByIDs builds a SELECT of cols from the rows of table whose idCol is in the id list
// ids, with conditions where and a tail (ORDER BY, locking). The id list's parameter comes
// first in every dialect. On MySQL it is a join driven by the list, for the reason of
// updateByIDs, so that a locking read locks only the listed rows.
func (d *dialect) selectByIDs(cols, table, idCol, ids, where, tail string) string {
	if d == mysqlDialect {
		return "SELECT STRAIGHT_JOIN " + cols + " FROM (" + ids + ") AS j JOIN " + table + " FORCE INDEX (PRIMARY) ON " +
			table + "." + idCol + " = j.v WHERE " + where + tail
	}
	return "SELECT " + cols + " FROM " + table + " WHERE " + idCol + " IN (" + ids + ") AND " + where + tail
}

// byIDsArgs orders the arguments of an updateByIDs statement.
func (d *dialect) byIDsArgs(ids any, set, where []any) []any {
	args := make([]any, 0, 1+len(set)+len(where))
	if d == mysqlDialect {
		args = append(append(append(args, ids), set...), where...)
	} else {
		args = append(append(append(args, set...), ids), where...)
	}
	return args
}

// typed is a placeholder for a value of SQL type typ where the database cannot infer it
// (PostgreSQL, in a SELECT list).
func (d *dialect) typed(typ string) string {
	if d.dollar {
		return "?::" + typ
	}
	return "?"
}

// rebind rewrites '?' placeholders for the dialect. Our statements contain no '?' inside
// literals.
func (d *dialect) rebind(query string) string {
	if !d.dollar {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// query is one statement, built per dialect and prepared once per database handle.
type query struct {
	id    int
	build func(d *dialect) string
}

// queries is every statement of the package, registered at init by newQuery.
var queries []*query

// newQuery registers a statement whose text depends on the dialect.
func newQuery(build func(d *dialect) string) *query {
	q := &query{id: len(queries), build: build}
	queries = append(queries, q)
	return q
}

// sqlText registers a statement whose text is the same in every dialect.
func sqlText(text string) *query {
	return newQuery(func(*dialect) string { return text })
}
