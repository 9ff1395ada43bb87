package sqlstore

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orderlyhq/orderly"
)

func TestConnectionUnavailable(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	my := func(n uint16) error { return fmt.Errorf("stock x: %w", &mysql.MySQLError{Number: n}) }
	tests := []struct {
		name string
		err  error
		want string // code
	}{
		{"idle in transaction timeout", pg("25P03"), orderly.EUNAVAILABLE},
		{"admin shutdown (restart)", pg("57P01"), orderly.EUNAVAILABLE},
		{"cannot connect now (starting)", pg("57P03"), orderly.EUNAVAILABLE},
		{"connection failure", pg("08006"), orderly.EUNAVAILABLE},
		{"too many clients", pg("53300"), orderly.EUNAVAILABLE},
		{"MariaDB idle transaction timeout", my(4031), orderly.EUNAVAILABLE},
		{"MySQL connection killed", my(1927), orderly.EUNAVAILABLE},
		{"MySQL too many connections", my(1040), orderly.EUNAVAILABLE},
		{"bad connection", fmt.Errorf("begin: %w", driver.ErrBadConn), orderly.EUNAVAILABLE},
		{"invalid connection", fmt.Errorf("begin: %w", mysql.ErrInvalidConn), orderly.EUNAVAILABLE},
		{"MySQL bad connection, nothing written", fmt.Errorf("begin: %w", errors.New("bad connection")), orderly.EUNAVAILABLE},
		{"unexpected EOF", fmt.Errorf("order x: %w", io.ErrUnexpectedEOF), orderly.EUNAVAILABLE},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, orderly.EUNAVAILABLE},
		{"lock timeout", pg("55P03"), orderly.EUNAVAILABLE},
		{"MySQL lock wait timeout", my(1205), orderly.EUNAVAILABLE},
		{"unique violation stays internal", pg("23505"), orderly.EINTERNAL},
		{"check violation stays internal", my(3819), orderly.EINTERNAL},
		{"any other error", errors.New("boom"), orderly.EINTERNAL},
		{"a domain error keeps its code", orderly.Errorf(orderly.ENOTFOUND, "order x not found"), orderly.ENOTFOUND},
	}
	for _, tt := range tests {
		err := connectionUnavailable(tt.err)
		if got := orderly.ErrorCode(err); got != tt.want {
			t.Errorf("%s: code %q, want %q (%v)", tt.name, got, tt.want, err)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: the driver error is lost from the chain: %v", tt.name, err)
		}
	}
	if connectionUnavailable(nil) != nil {
		t.Error("nil became an error")
	}
}
