package fault

import (
	"bufio"
	"database/sql"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redisDo sends one inline command and returns the first line of the answer.
func redisDo(t *testing.T, addr, cmd string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, cmd+"\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// TestRedisKillLosesEverything: kill -9 and a start on the same port give an empty Redis.
func TestRedisKillLosesEverything(t *testing.T) {
	t.Parallel()
	r, err := StartRedis(t.Context())
	if err != nil {
		t.Skipf("no redis-server: %v", err)
	}
	dir := r.dir
	if got := redisDo(t, r.Addr(), "SET k v"); got != "+OK" {
		t.Fatalf("SET: %q", got)
	}
	r.Kill()
	if _, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		t.Fatal("Redis still answers after Kill")
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := redisDo(t, r.Addr(), "GET k"); got != "$-1" {
		t.Errorf("GET k after kill -9 and start = %q, want nil ($-1): no persistence", got)
	}
	r.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left %s: %v", dir, err)
	}
}

// TestProxyCut: a connection through the proxy is closed by Cut, new ones are refused for
// the outage and accepted after it.
func TestProxyCut(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echoDone := make(chan struct{})
	go func() { // an echo server
		defer close(echoDone)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-echoDone })
	p, err := StartProxy(t.Context(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	echo := func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	held, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	_, _ = io.WriteString(held, "x\n")
	if _, err := bufio.NewReader(held).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	const outage = 500 * time.Millisecond
	p.Cut(outage)
	_ = held.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Error("a connection through the proxy survived Cut")
	}
	if err := echo(); err == nil {
		t.Error("a new connection was served during the outage")
	}
	deadline := time.Now().Add(outage + 3*time.Second)
	for echo() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the proxy still refuses after the outage")
		}
	}
}

// TestPostgresRestart: the private cluster answers, goes away during Restart, answers again
// on the same port with its data, and Stop removes it.
func TestPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("initdb takes seconds")
	}
	t.Parallel()
	ctx := t.Context()
	p, err := StartPostgres(ctx)
	if err != nil {
		if strings.Contains(err.Error(), "not installed") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir := p.dir
	db, err := sql.Open("pgx", p.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := conn.PingContext(ctx); err == nil {
		t.Error("a connection from before the restart still works")
	}
	_ = conn.Close()
	var v int
	if err := db.QueryRowContext(ctx, `SELECT v FROM kept`).Scan(&v); err != nil || v != 42 {
		t.Errorf("after the restart: %d, %v; want 42", v, err)
	}
	_ = db.Close()
	p.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left %s: %v", dir, err)
	}
}
