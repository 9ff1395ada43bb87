package sqlstore

import (
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
)

// dialect holds what differs between SQL databases. Queries are written once, with '?'
// placeholders and these fragments, and built per dialect when a DB opens.
type dialect struct {
	name  string
	goose goose.Dialect
	// dollar placeholders ($1, $2, …) instead of '?'.
	dollar bool
	// now selects the database clock as unix milliseconds, truncated.
	now string
	// ids is a subquery yielding the elements of one JSON array parameter (strings or
	// integers): it keeps statement texts constant whatever the number of ids, so every
	// statement is prepared once.
	ids string
	// lockRows is appended to a SELECT that claims rows; skipLocked to one that claims
	// rows other transactions may be claiming. Empty where the database has one writer.
	lockRows, skipLocked string
}

var sqliteDialect = &dialect{
	name:  "sqlite",
	goose: goose.DialectSQLite3,
	// unixepoch('subsec') is the integer millisecond clock divided by 1000.0; ROUND only
	// undoes the float error of that division.
	now: `SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`,
	ids: `SELECT value FROM json_each(?)`,
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
