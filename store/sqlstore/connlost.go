package sqlstore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orderlyhq/orderly"
)

// connectionLostMessage is the message of the EUNAVAILABLE error of a lost connection,
// shown to API clients.
const connectionLostMessage = "the database connection was lost (the database restarted or ended the session); retry later"

// connectionUnavailable returns err as EUNAVAILABLE, the driver error kept in the chain
// for logs and retry checks, when it says that the connection to the database was lost:
// the server shut down or restarted, ended the session (an idle-in-transaction timeout, a
// KILL), or the network dropped it. The transaction did not commit, or (when the
// connection went during COMMIT) its outcome is unknown: in both cases the same request
// may be sent again, and every request of the API is idempotent or refused the second
// time. Errors that already carry a domain code are returned as they are.
//
// A statement that gave up waiting for a row lock (Config.LockTimeout) is EUNAVAILABLE
// too: its transaction rolled back and changed nothing.
func connectionUnavailable(err error) error {
	if err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		return err
	}
	switch {
	case connectionLost(err):
		return fmt.Errorf("%w: %w", orderly.Errorf(orderly.EUNAVAILABLE, connectionLostMessage), err)
	case lockTimedOut(err):
		return fmt.Errorf("%w: %w", orderly.Errorf(orderly.EUNAVAILABLE, lockTimeoutMessage), err)
	}
	return err
}

// lockTimeoutMessage is the message of the EUNAVAILABLE error of a lock wait that timed out.
const lockTimeoutMessage = "a row lock was not granted within the lock timeout; nothing was changed, retry later"

// lockTimedOut reports a lock wait ended by the lock timeout: PostgreSQL lock_not_available
// (55P03), MySQL lock wait timeout (1205), and the wait for a row gate of this process
// past the lock timeout (gate.go).
func lockTimedOut(err error) bool {
	if errors.Is(err, errGateTimeout) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "55P03"
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}

// connectionLost reports whether err comes from a connection to PostgreSQL or MySQL that
// broke.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError // no connection could be made: down, restarting, too many clients
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"): // connection exception
			return true
		case pe.Code == "25P03": // idle_in_transaction_session_timeout
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03": // admin / crash shutdown, cannot connect now
			return true
		case pe.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1040, // too many connections
			1053, // server shutdown in progress
			1927, // connection was killed
			4031: // disconnected by the server because of inactivity (idle_transaction_timeout)
			return true
		}
		return false
	}
	if badConnNoWrite(err) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne *net.OpError
	return errors.As(err, &ne)
}

// badConnNoWrite reports go-sql-driver's unexported errBadConnNoWrite ("bad connection"):
// a pooled connection found closed (MariaDB ended the session for its idle transaction)
// before anything was written. The driver turns it into driver.ErrBadConn, which
// database/sql answers by taking another connection, everywhere but in BeginTx with an
// isolation level, where the SET TRANSACTION statement returns it as it is (mysql v1.10.1,
// connection.go BeginTx); it reached clients as a 500 in `simulate --faults sigstop` on
// MariaDB. The driver closed the connection, so database/sql does not hand it out again.
func badConnNoWrite(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "bad connection" {
			return true
		}
	}
	return false
}
