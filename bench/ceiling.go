package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// CeilingRows is the size of the table the ceiling scenario updates.
const CeilingRows = 100_000

// ceiling measures the database's own write ceiling on this machine, beside the
// scenarios that hit it: single-row UPDATE transactions (pgbench's simplest write; on
// PostgreSQL each commit waits for its WAL flush) from 8 clients, and row writes in
// set-based statements of 1 000 rows, one transaction each (how a close batch writes), from
// one client per core. Each runs for the steady duration, at most 10 s. A close costs
// DBRowWritesPerClose row writes (burst): RowWritesPerS over that is the most closes per
// second the database could take, whatever orderly does above it.
func (r *runner) ceiling(ctx context.Context) (*Outcome, error) {
	db, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, err := db.SQL.ExecContext(ctx, `CREATE TABLE ceiling (id BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)`); err != nil {
		return nil, err
	}
	if err := db.bulkInsert(ctx, "ceiling", []string{"id", "n"}, CeilingRows, func(i int, dst []any) {
		dst[0], dst[1] = int64(i), int64(0)
	}); err != nil {
		return nil, err
	}
	if err := db.Analyze(ctx); err != nil {
		return nil, err
	}
	d := min(r.cfg.Duration, 10*time.Second)
	clients, batchers := 8, 2
	if db.Dialect == "sqlite" {
		clients, batchers = 1, 1 // one writer
	}
	db.SQL.SetMaxOpenConns(max(clients, batchers))
	one := `UPDATE ceiling SET n = n + 1 WHERE id = ` + db.Placeholder(1)
	r.progress("single-row updates from %d clients for %s", clients, d)
	commits, err := forDuration(ctx, d, clients, func(ctx context.Context, rng *rand.Rand) (int64, error) {
		_, err := db.SQL.ExecContext(ctx, one, rng.Int64N(CeilingRows))
		return 1, err
	})
	if err != nil {
		return nil, err
	}
	const perStmt = 1000
	many := `UPDATE ceiling SET n = n + 1 WHERE id IN (` + strings.TrimSuffix(strings.Repeat("?,", perStmt), ",") + `)`
	if db.Dialect == "postgres" {
		many = `UPDATE ceiling SET n = n + 1 WHERE id = ANY($1)`
	}
	r.progress("updates of %d rows a statement from %d clients for %s", perStmt, batchers, d)
	rows, err := forDuration(ctx, d, batchers, func(ctx context.Context, rng *rand.Rand) (int64, error) {
		ids := make([]int64, perStmt)
		start := rng.Int64N(CeilingRows - perStmt*16)
		for i := range ids {
			ids[i] = start + int64(i)*16 // a close batch's rows are scattered too
		}
		var args []any
		if db.Dialect == "postgres" {
			args = []any{ids}
		} else {
			for _, id := range ids {
				args = append(args, id)
			}
		}
		res, err := db.SQL.ExecContext(ctx, many, args...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		return n, err
	})
	if err != nil {
		return nil, err
	}
	secs := d.Seconds()
	return &Outcome{Result: &Result{CommitsPerS: Ptr(round1(float64(commits) / secs)),
		RowWritesPerS: Ptr(round1(float64(rows) / secs))}}, nil
}

// forDuration runs op from n goroutines until d has passed and returns the sum of what the
// calls returned. Errors: the first error of a call before d passed.
func forDuration(ctx context.Context, d time.Duration, n int, op func(ctx context.Context, rng *rand.Rand) (int64, error)) (int64, error) {
	timed, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	g, gctx := errgroup.WithContext(timed)
	var total atomic.Int64
	for i := range n {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))) //nolint:gosec // which rows to update, not a secret
			for gctx.Err() == nil {
				k, err := op(gctx, rng)
				if err != nil {
					if timed.Err() != nil {
						return nil //nolint:nilerr // a call cut off by the end of d is no failure
					}
					return fmt.Errorf("bench ceiling: %w", err)
				}
				total.Add(k)
			}
			return nil
		})
	}
	err := g.Wait()
	return total.Load(), err
}

// dbWork is what the database wrote, from its own statistics (PostgreSQL only).
type dbWork struct {
	rowWrites, walBytes int64
}

// work reads the run database's row writes (inserted + updated + deleted tuples of
// pg_stat_database) and the WAL position. PostgreSQL reports a backend's counts when its
// transaction ends, at most once a second: read it a second after the work. ok is false on
// SQLite.
func (db *DB) work(ctx context.Context) (w dbWork, ok bool, err error) {
	if db.Dialect != "postgres" {
		return w, false, nil
	}
	conn, err := db.SQL.Conn(ctx)
	if err != nil {
		return w, false, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		return w, false, err
	}
	err = conn.QueryRowContext(ctx, `SELECT tup_inserted + tup_updated + tup_deleted, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&w.rowWrites, &w.walBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return w, false, nil
	}
	return w, err == nil, err
}

// settledWork reads work until two reads half a second apart agree (the exiting
// backends' statistics have arrived), or returns the last read after limit.
func (db *DB) settledWork(ctx context.Context, limit time.Duration) (dbWork, error) {
	prev, _, err := db.work(ctx)
	for end := time.Now().Add(limit); err == nil && time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return prev, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var w dbWork
		if w, _, err = db.work(ctx); err == nil && w.rowWrites == prev.rowWrites {
			return w, nil
		}
		prev = w
	}
	return prev, err
}
