// Package storetest is the conformance suite of package store: one set of tests that every
// dialect's implementation of store.Store runs unchanged, so that SQLite, PostgreSQL and
// MySQL agree on every query's results, guards, error codes and transaction semantics.
//
// A dialect's test package calls Run with a function that opens a fresh, migrated, empty
// store on the database's real clock and closes it in t.Cleanup:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: filepath.Join(t.TempDir(), "test.db")})
//			…
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Besides the methods of store.Tx, the suite checks the schema's CHECK constraints that
// guard invariants (no negative stock; a closed order has closed_at and close_reason), so
// every dialect's migrations must keep them.
//
// Every test opens its own store and runs in parallel with the others. Tests pass explicit
// times (around t0) to the store, so they never depend on the wall clock and never sleep;
// only the Tx.Now test reads the database clock. Races start their transactions together
// behind a barrier and repeat for many rounds in one store; tests that need a transaction
// blocked behind another's lock wait until the database shows it (see LockWaiter).
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// LockWaiter is implemented by a store under test that can show its transactions waiting
// for one another. The suite's lock-wait tests take their next step only once the database
// shows the waiter blocked, never after a sleep; they fail when the store does not
// implement it.
type LockWaiter interface {
	// LockWaits returns a count that rises by one when a transaction of the store starts
	// to wait for a lock another transaction holds (on SQLite: for the one writer
	// connection), and does not fall while that transaction waits.
	LockWaits(ctx context.Context) (int64, error)
}

// opener opens a fresh, migrated, empty store that is closed when t ends.
type opener = func(t *testing.T) store.Store

// Run runs the conformance suite as subtests of t. open must return a fresh, migrated,
// empty store whose Tx.Now is the database's own clock, and close it in t.Cleanup; it is
// called once per test, from that test's goroutine, possibly in parallel with other calls.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	groups := []struct {
		name string
		run  func(t *testing.T, open opener)
	}{
		{"Tx", testTx},
		{"Orders", testOrders},
		{"Stock", testStock},
		{"Coupons", testCoupons},
		{"Payments", testPayments},
		{"CallbackRefusals", testCallbackRefusals},
		{"ChannelEvents", testChannelEvents},
		{"Refunds", testRefunds},
		{"Groups", testGroups},
		{"Trips", testTrips},
		{"Wallets", testWallets},
		{"Sagas", testSagas},
		{"Many", testMany},
		{"Outbox", testOutbox},
		{"Leases", testLeases},
		{"Claims", testClaims},
		{"GuardRecheck", testGuardRecheck},
		{"Races", testRaces},
		{"Fence", testFence},
		{"Admin", testAdmin},
		{"Overview", testOverview},
		{"Webhooks", testWebhooks},
		{"Keys", testKeys},
		{"Idempotency", testIdempotency},
		{"Metadata", testMetadata},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			g.run(t, open)
		})
	}
}

// t0 is the suite's reference time: UTC, on a whole millisecond, far from the wall clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)

// setup marks t parallel and opens its own store.
func setup(t *testing.T, open opener) (context.Context, store.Store) {
	t.Helper()
	t.Parallel()
	return t.Context(), open(t)
}

// inTx runs fn in a write transaction and fails the test if it returns an error. Assertions
// belong after inTx, not inside fn: fn only collects values.
func inTx(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.InTx(t.Context(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// write runs fn in a write transaction and returns its result; it fails the test on error.
func write[T any](t *testing.T, s store.Store, fn func(tx store.Tx) (T, error)) T {
	t.Helper()
	var v T
	inTx(t, s, func(tx store.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	return v
}

// read runs fn in a read-only transaction and returns its result; it fails the test on error.
func read[T any](t *testing.T, s store.Store, fn func(tx store.Tx) (T, error)) T {
	t.Helper()
	var v T
	err := s.Read(t.Context(), func(tx store.Tx) error {
		var err error
		v, err = fn(tx)
		return err
	})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return v
}

// txErr runs fn in a write transaction and returns the error InTx returned; the
// transaction rolled back when it is not nil.
func txErr(t *testing.T, s store.Store, fn func(tx store.Tx) error) error {
	t.Helper()
	return s.InTx(t.Context(), fn)
}

// wantCode fails the test unless err carries the orderly error code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := orderly.ErrorCode(err); got != code {
		t.Errorf("%s: error code %q (err %v), want %q", what, got, err, code)
	}
}

// equal fails the test unless got and want have the same canonical JSON encoding.
// Comparing JSON compares every exported field, shows times in RFC 3339 with their zone (so
// a time that is not UTC or not truncated to the millisecond differs) and prints readably on
// mismatch. An empty array equals null, so a dialect may return nil or empty slices.
func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := canonical(got)
	if err != nil {
		t.Fatalf("%s: encode got: %v", what, err)
	}
	w, err := canonical(want)
	if err != nil {
		t.Fatalf("%s: encode want: %v", what, err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s:\ngot  %s\nwant %s", what, g, w)
	}
}

// canonical returns v's JSON encoding with every empty array replaced by null, indented.
func canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep int64 values exact
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return json.MarshalIndent(emptyToNull(x), "", "  ")
}

func emptyToNull(x any) any {
	switch v := x.(type) {
	case []any:
		if len(v) == 0 {
			return nil
		}
		for i := range v {
			v[i] = emptyToNull(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = emptyToNull(v[k])
		}
	}
	return x
}

// jsonEqual reports whether two JSON documents are equal after decoding, so that a dialect
// storing JSON in a normalising type (jsonb) still conforms.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// errRollback is returned by test transactions that must roll back.
var errRollback = errors.New("storetest: roll back")
