package redact

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		// Nothing to redact: unchanged, byte for byte.
		{"orderly.db", "orderly.db"},
		{"sqlite:/var/lib/orderly/orderly.db", "sqlite:/var/lib/orderly/orderly.db"},
		{"file:/tmp/o.db?_pragma=x", "file:/tmp/o.db?_pragma=x"},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"", ""},
		// Passwords in URLs.
		{"postgres://user:secret@db.example:5432/shop?sslmode=require", "postgres://user:xxxxx@db.example:5432/shop?sslmode=require"},
		{"postgresql://user:s%40cr%2Fet@db/shop", "postgresql://user:xxxxx@db/shop"},
		{"mysql://root:secret@127.0.0.1:3306/orderly", "mysql://root:xxxxx@127.0.0.1:3306/orderly"},
		{"redis://:secret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"rediss://default:secret@cache:6380", "rediss://default:xxxxx@cache:6380"},
		{"nats://alice:secret@127.0.0.1:4222", "nats://alice:xxxxx@127.0.0.1:4222"},
		// A NATS user alone is a token.
		{"nats://s3cr3t-token@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"nats://a:secret@n1:4222,nats://tok@n2:4222,n3:4222", "nats://a:xxxxx@n1:4222,nats://xxxxx@n2:4222,n3:4222"},
		// Credentials in query parameters.
		{"postgres://db/shop?user=u&password=secret", "postgres://db/shop?password=xxxxx&user=u"},
		{"postgres://u@db/shop?sslpassword=secret&sslmode=verify-full", "postgres://u@db/shop?sslmode=verify-full&sslpassword=xxxxx"},
		// URLs that do not parse lose their user information.
		{"postgres://user:p#ss/w?rd@db:5432/shop", "postgres://xxxxx@db:5432/shop"},
		{"postgres://user:secret@db:port/shop", "postgres://xxxxx@db:port/shop"},
		// libpq key=value strings.
		{"host=db user=u password=secret dbname=shop", "host=db user=u password=xxxxx dbname=shop"},
		{"host=db password='sec ret' dbname=shop", "host=db password=xxxxx dbname=shop"},
		// go-sql-driver/mysql DSNs.
		{"root:secret@tcp(127.0.0.1:3306)/orderly?parseTime=true", "root:xxxxx@tcp(127.0.0.1:3306)/orderly?parseTime=true"},
		{"root:se@cret@tcp(db)/orderly", "root:xxxxx@tcp(db)/orderly"},
		{"root@tcp(db)/orderly", "root@tcp(db)/orderly"},
	} {
		got := URL(tc.in)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"secret", "s3cr3t", "sec ret", "p#ss"} {
			if strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q still holds %q", tc.in, got, secret)
			}
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	cause := errors.New("connection refused")
	for _, tc := range []struct{ conn, msg, want string }{
		{"postgres://u:secret@db:port/x", `parse "postgres://u:secret@db:port/x": invalid port`, `parse "postgres://u:xxxxx@db:port/x": invalid port`},
		{"postgres://u:s%40cret@db/x", `password s@cret refused`, `password xxxxx refused`},
		{"nats://tok3n@n1:4222", `nats: auth tok3n failed`, `nats: auth xxxxx failed`},
		{"host=db password='sec ret'", `bad password sec ret`, `bad password xxxxx`},
		{"root:secret@tcp(db)/o", `dial root:secret@tcp(db)`, `dial root:xxxxx@tcp(db)`},
		{"postgres://db/x?password=secret", `uses secret`, `uses xxxxx`},
		{"postgres://postgres@db/x", `no password here`, `no password here`},
	} {
		err := Error(fmt.Errorf("%s: %w", tc.msg, cause), tc.conn)
		if err.Error() != tc.want+": connection refused" {
			t.Errorf("Error(%q, %q) = %q, want %q", tc.msg, tc.conn, err, tc.want+": connection refused")
		}
		if !errors.Is(err, cause) {
			t.Errorf("Error(%q) lost its chain", tc.msg)
		}
	}
	if Error(nil, "postgres://u:secret@db/x") != nil {
		t.Error("Error(nil) != nil")
	}
}
