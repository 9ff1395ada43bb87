package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"
)

// Notifies reports whether the database delivers notifications across instances
// (PostgreSQL LISTEN/NOTIFY, on a store opened from a URL: the listener dials it). Where it does not, the timer polls instead.
func (db *DB) Notifies() bool { return db.d == postgresDialect && db.dsn != "" }

// Notify sends payload on channel to every listening instance (PostgreSQL NOTIFY). It is
// a no-op on the other dialects.
func (db *DB) Notify(ctx context.Context, channel, payload string) error {
	if !db.Notifies() {
		return nil
	}
	if _, err := db.writer.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return fmt.Errorf("notify %s: %w", channel, err)
	}
	return nil
}

// Listen calls fn with the payload of every notification on channel until ctx ends, on a
// dedicated connection that is re-established 1 s after it is lost; after each
// (re)connection fn is called once with "" (notifications sent while disconnected are
// lost, so the caller should re-read what they announce). logErr receives connection
// errors. On dialects without notifications it returns at once.
func (db *DB) Listen(ctx context.Context, channel string, fn func(payload string), logErr func(error)) error {
	if !db.Notifies() {
		return nil
	}
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.dsn) },
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil { // not the shutdown
				logErr(err)
			}
		},
		ReconnectDelay: time.Second,
	}
	l.Handle(channel, listenHandler(fn))
	if err := l.Listen(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("listen %s: %w", channel, err)
	}
	return nil // ended by ctx
}

// listenHandler adapts fn to pgxlisten, with a backlog call after each connection.
type listenHandler func(payload string)

func (h listenHandler) HandleNotification(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
	h(n.Payload)
	return nil
}

func (h listenHandler) HandleBacklog(context.Context, string, *pgx.Conn) error {
	h("")
	return nil
}
