package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// dialects are the databases the books are checked on: SQLite always, PostgreSQL and MySQL
// when their test URLs are set.
var dialects = []string{"sqlite", "postgres", "mysql"}

// openDB migrates a fresh database of dialect as `orderly migrate` does (no sim channel).
func openDB(t *testing.T, dialect string) *sqlstore.DB {
	t.Helper()
	url := sqlitetest.Path(t)
	if dialect != "sqlite" {
		url = testdb.Fresh(t, testdb.URL(t, dialect))
	}
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// simTables lists the gateway's tables (and its version table) that db has.
func simTables(t *testing.T, db *sqlstore.DB) []string {
	t.Helper()
	var have []string
	readTx(t, db, func(tx store.Tx) error {
		for _, name := range []string{"sim_holds", "sim_hold_keys", "sim_gateway_faults", "orderly_sim_schema_version"} {
			ok, err := sqlstore.HasTable(t.Context(), tx, name)
			if err != nil {
				return err
			}
			if ok {
				have = append(have, name)
			}
		}
		return nil
	})
	return have
}

// TestMigrateWithoutSim: a database migrated without the sim channel has none of its
// tables, and no holds to read; UseDatabase creates them (twice is a no-op) on the
// gateway's own version table.
func TestMigrateWithoutSim(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			db := openDB(t, d)
			if have := simTables(t, db); len(have) != 0 {
				t.Fatalf("tables after migrate without sim: %v, want none", have)
			}
			readTx(t, db, func(tx store.Tx) error {
				holds, faults, err := ReadHolds(t.Context(), tx)
				if holds != nil || faults != nil || err != nil {
					t.Errorf("ReadHolds without sim: %v, %v, %v; want nothing", holds, faults, err)
				}
				return nil
			})
			for range 2 {
				if err := New().UseDatabase(t.Context(), db); err != nil {
					t.Fatal(err)
				}
			}
			if have, want := simTables(t, db), []string{"sim_holds", "sim_hold_keys", "sim_gateway_faults", "orderly_sim_schema_version"}; !reflect.DeepEqual(have, want) {
				t.Fatalf("tables after UseDatabase: %v, want %v", have, want)
			}
		})
	}
}

// TestBooks checks the gateway's books on every dialect: round trip, the unique id,
// ENOTFOUND, the one guarded resolution (pending → posted once: a second resolve changes
// nothing), the refund guard (never more than captured), the CHECK that keeps a hold from
// being over-captured, the keys (unique, listed per hold oldest first), the faults that
// ReadHolds finds, and the armed faults (taken exactly as many times as armed; re-arming
// replaces the count).
func TestBooks(t *testing.T) {
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			testBooks(t, d)
		})
	}
}

func testBooks(t *testing.T, dialect string) {
	ctx, db, g := t.Context(), openDB(t, dialect), New()
	if err := g.UseDatabase(ctx, db); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 123_000_000, time.UTC)
	get := func(id string) *hold {
		return read(t, db, func(tx store.Tx) (*hold, error) { return getHold(ctx, tx, id) })
	}
	h := &hold{Hold: orderly.Hold{ID: "hold-1", Amount: 5000, State: orderly.HoldPending, ExpiresAt: t0.Add(2 * time.Hour)}, CreatedAt: t0}
	inTx(t, db, func(tx store.Tx) error { return insertHold(ctx, tx, h) })
	equal(t, "hold read back", get("hold-1"), h)
	equal(t, "hold read locked", write(t, db, func(tx store.Tx) (*hold, error) { return g.lockHold(ctx, tx, "hold-1") }), h)
	err := db.InTx(ctx, func(tx store.Tx) error { return insertHold(ctx, tx, h) })
	equal(t, "code of a second hold of one id", orderly.ErrorCode(err), orderly.ECONFLICT)
	err = db.Read(ctx, func(tx store.Tx) error { _, err := getHold(ctx, tx, "no-such-hold"); return err })
	equal(t, "code of an unknown hold", orderly.ErrorCode(err), orderly.ENOTFOUND)

	// Never over-captured: captured + released ≤ amount is a CHECK.
	over := *h
	over.State, over.Captured, over.Released, over.ResolvedAt = orderly.HoldPosted, 5000, 1, &t0
	if err := db.InTx(ctx, func(tx store.Tx) error { _, err := resolve(ctx, tx, &over); return err }); err == nil {
		t.Fatal("a capture of 5000 with 1 released from a hold of 5000 was written")
	}
	equal(t, "hold after the refused resolve", get("hold-1"), h)

	// pending → posted once.
	at := t0.Add(time.Minute)
	posted := *h
	posted.State, posted.Captured, posted.Released, posted.ResolvedAt = orderly.HoldPosted, 3820, 1180, &at
	equal(t, "resolve a pending hold", write(t, db, func(tx store.Tx) (bool, error) { return resolve(ctx, tx, &posted) }), true)
	equal(t, "hold after the capture", get("hold-1"), &posted)
	voided := *h
	voided.State, voided.Released, voided.ResolvedAt = orderly.HoldVoided, 5000, &at
	equal(t, "resolve a posted hold", write(t, db, func(tx store.Tx) (bool, error) { return resolve(ctx, tx, &voided) }), false)
	equal(t, "hold after the refused void", get("hold-1"), &posted)

	// Refunds: never more than captured.
	equal(t, "refund 3000", write(t, db, func(tx store.Tx) (bool, error) { return refund(ctx, tx, "hold-1", 3000) }), true)
	equal(t, "refund 821 more", write(t, db, func(tx store.Tx) (bool, error) { return refund(ctx, tx, "hold-1", 821) }), false)
	equal(t, "refund the last 820", write(t, db, func(tx store.Tx) (bool, error) { return refund(ctx, tx, "hold-1", 820) }), true)
	equal(t, "refunded", get("hold-1").Refunded, int64(3820))

	// Keys.
	k1 := &HoldKey{Key: "trip-1:payment/capture/action", HoldID: "hold-1", Op: "capture_hold", Amount: 3820, CreatedAt: at}
	k2 := &HoldKey{Key: "trip-1:refund/refund/action", HoldID: "hold-1", Op: "refund", Amount: 3820, CreatedAt: at.Add(time.Second)}
	k3 := &HoldKey{Key: "other", HoldID: "hold-2", Op: "void_hold", Amount: 0, CreatedAt: t0}
	inTx(t, db, func(tx store.Tx) error {
		for _, k := range []*HoldKey{k2, k1, k3} {
			if err := insertKey(ctx, tx, k); err != nil {
				return err
			}
		}
		return nil
	})
	err = db.InTx(ctx, func(tx store.Tx) error { return insertKey(ctx, tx, k1) })
	equal(t, "code of a key used twice", orderly.ErrorCode(err), orderly.ECONFLICT)
	equal(t, "key read back", read(t, db, func(tx store.Tx) (*HoldKey, error) { return getKey(ctx, tx, k1.Key) }), k1)
	err = db.Read(ctx, func(tx store.Tx) error { _, err := getKey(ctx, tx, "no-such-key"); return err })
	equal(t, "code of an unknown key", orderly.ErrorCode(err), orderly.ENOTFOUND)
	equal(t, "keys of hold-1", read(t, db, func(tx store.Tx) ([]*HoldKey, error) { return keysOf(ctx, tx, "hold-1") }), []*HoldKey{k1, k2})

	// ReadHolds: every hold; a second capture key is a fault of the books.
	h2 := &hold{Hold: orderly.Hold{ID: "hold-2", Amount: 1, State: orderly.HoldPending, ExpiresAt: t0}, CreatedAt: t0}
	inTx(t, db, func(tx store.Tx) error { return insertHold(ctx, tx, h2) })
	readHolds := func() (map[string]*orderly.Hold, []string) {
		var (
			holds  map[string]*orderly.Hold
			faults []string
		)
		readTx(t, db, func(tx store.Tx) (err error) { holds, faults, err = ReadHolds(ctx, tx); return err })
		return holds, faults
	}
	holds, faults := readHolds()
	equal(t, "holds read", holds, map[string]*orderly.Hold{"hold-1": &get("hold-1").Hold, "hold-2": &h2.Hold})
	equal(t, "faults of sound books", faults, []string(nil))
	inTx(t, db, func(tx store.Tx) error {
		return insertKey(ctx, tx, &HoldKey{Key: "again", HoldID: "hold-1", Op: "capture_hold", Amount: 3820, CreatedAt: at.Add(2 * time.Second)})
	})
	_, faults = readHolds()
	equal(t, "faults of a double capture", faults,
		[]string{"gateway hold hold-1 captured under 2 keys (trip-1:payment/capture/action, again): a double capture"})

	// Faults: armed n, taken n times; re-arming replaces; 0 disarms.
	take := func(op GatewayOp) bool {
		return write(t, db, func(tx store.Tx) (bool, error) { return takeFault(ctx, tx, op) })
	}
	arm := func(op GatewayOp, n int) { inTx(t, db, func(tx store.Tx) error { return armFault(ctx, tx, op, n) }) }
	equal(t, "take an unarmed fault", take(GatewayCaptureHold), false)
	arm(GatewayCaptureHold, 2)
	arm(GatewayVoidHold, 5)
	equal(t, "takes of two armed faults", []bool{take(GatewayCaptureHold), take(GatewayCaptureHold), take(GatewayCaptureHold)}, []bool{true, true, false})
	arm(GatewayCaptureHold, 1)
	arm(GatewayCaptureHold, 0)
	equal(t, "take a disarmed fault", take(GatewayCaptureHold), false)
	equal(t, "take another operation's fault", take(GatewayVoidHold), true)
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
}

func inTx(t *testing.T, db *sqlstore.DB, fn func(tx store.Tx) error) {
	t.Helper()
	if err := db.InTx(t.Context(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

func readTx(t *testing.T, db *sqlstore.DB, fn func(tx store.Tx) error) {
	t.Helper()
	if err := db.Read(t.Context(), fn); err != nil {
		t.Fatalf("Read: %v", err)
	}
}

func write[T any](t *testing.T, db *sqlstore.DB, fn func(tx store.Tx) (T, error)) (v T) {
	t.Helper()
	inTx(t, db, func(tx store.Tx) (err error) { v, err = fn(tx); return err })
	return v
}

func read[T any](t *testing.T, db *sqlstore.DB, fn func(tx store.Tx) (T, error)) (v T) {
	t.Helper()
	readTx(t, db, func(tx store.Tx) (err error) { v, err = fn(tx); return err })
	return v
}
