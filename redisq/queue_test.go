package redisq

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/fault"
)

// go-redis retries a failed dial in the background once a second until it succeeds or
// the pool is closed, and notices the close only when it wakes up: a client closed while
// Redis was unreachable (TestServeWithoutRedis, TestLazy) leaves it for up to a second.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// base is the reference time of the tests; scores are offsets from it in milliseconds.
var base = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// redisURL returns ORDERLY_TEST_REDIS_URL, skipping the test when it is unset (failing it
// when ORDERLY_TEST_REQUIRE_SERVICES=1).
func redisURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("ORDERLY_TEST_REDIS_URL")
	if u == "" {
		if os.Getenv("ORDERLY_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatal("ORDERLY_TEST_REDIS_URL is not set and ORDERLY_TEST_REQUIRE_SERVICES=1")
		}
		t.Skip("set ORDERLY_TEST_REDIS_URL (e.g. redis://127.0.0.1:6379/0) to run the Redis tests")
	}
	return u
}

// bundle is what setup returns: a queue with its own random prefix, and a raw client on
// the same server for inspecting its keys.
type bundle struct {
	q      *Queue
	raw    *redis.Client
	prefix string
}

// setup connects a Queue with a fresh random Prefix; t.Cleanup deletes its keys and closes
// both clients, so tests run in parallel on the shared server without FLUSHALL.
func setup(t *testing.T) *bundle {
	t.Helper()
	u := redisURL(t)
	prefix := "orderlytest-" + rand.Text()
	q, err := New(t.Context(), Config{URL: u, Prefix: prefix})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	raw := redis.NewClient(opts)
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := raw.Del(ctx, dueKey(prefix)).Err(); err != nil {
			t.Errorf("delete keys of %s: %v", prefix, err)
		}
		if err := q.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := raw.Close(); err != nil {
			t.Errorf("close raw client: %v", err)
		}
	})
	return &bundle{q: q, raw: raw, prefix: prefix}
}

// state returns the whole sorted set as id → score (unix ms offset from base).
func (b *bundle) state(t *testing.T) map[string]int {
	t.Helper()
	zs, err := b.raw.ZRangeWithScores(t.Context(), dueKey(b.prefix), 0, -1).Result()
	if err != nil {
		t.Fatalf("read state: %v", err)
	}
	got := make(map[string]int, len(zs))
	for _, z := range zs {
		got[z.Member.(string)] = int(int64(z.Score) - base.UnixMilli())
	}
	return got
}

// add adds id → offset ms items.
func (b *bundle) add(t *testing.T, items map[string]int) {
	t.Helper()
	if err := b.q.Add(t.Context(), delayItems(items)); err != nil {
		t.Fatalf("Add: %v", err)
	}
}

func delayItems(items map[string]int) []closer.DelayItem {
	out := make([]closer.DelayItem, 0, len(items))
	for _, id := range slices.Sorted(maps.Keys(items)) {
		out = append(out, closer.DelayItem{OrderID: id, CloseAt: at(items[id])})
	}
	return out
}

// numbered returns n items "o0000".."o<n-1>" with scores start, start+step, ….
func numbered(n, start, step int) map[string]int {
	m := make(map[string]int, n)
	for i := range n {
		m[fmt.Sprintf("o%04d", i)] = start + i*step
	}
	return m
}

// dropBelow deletes the ids of m that sort before id, and returns m.
func dropBelow(m map[string]int, id string) map[string]int {
	maps.DeleteFunc(m, func(k string, _ int) bool { return k < id })
	return m
}

// ids returns prefix+"0000"-style ids numbered from (inclusive) to to (exclusive).
func ids(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%04d", prefix, i))
	}
	return out
}

func TestKeys(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"orderly", "tenant-a:orderly"} {
		k := dueKey(prefix)
		if !strings.HasPrefix(k, prefix+":") {
			t.Errorf("dueKey(%q) = %q, want prefix %q", prefix, k, prefix+":")
		}
		// Redis Cluster hashes only the first {…} of a key: it must be the queue's tag.
		lo, hi := strings.Index(k, "{"), strings.Index(k, "}")
		if lo < 0 || hi < lo || k[lo:hi+1] != "{delay}" {
			t.Errorf("dueKey(%q) = %q, want first hash tag {delay}", prefix, k)
		}
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = client.Close() })
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring of the error
		notErr  string // must not appear in the error
	}{
		{"neither URL nor client", Config{}, "Config.URL or Config.Client is required", ""},
		{"both URL and client", Config{URL: "redis://127.0.0.1:1/0", Client: client}, "not both", ""},
		{"bad scheme", Config{URL: "http://127.0.0.1:6379/0"}, "parse Config.URL", ""},
		{"bad URL hides password", Config{URL: "redis://user:s3cret@127.0.0.1:6379/%zz"}, "parse Config.URL", "s3cret"},
		{"braces in prefix", Config{URL: "redis://127.0.0.1:1/0", Prefix: "a{b}"}, "must not contain", ""},
		{"unreachable URL", Config{URL: "redis://:s3cret@127.0.0.1:1/0"}, "redis at 127.0.0.1:1 is unreachable", "s3cret"},
		{"unreachable client", Config{Client: client}, "unreachable", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			q, err := New(ctx, tt.cfg)
			if err == nil {
				_ = q.Close()
				t.Fatalf("New: got nil error, want %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("New: got %q, want it to contain %q", err, tt.wantErr)
			}
			if tt.notErr != "" && strings.Contains(err.Error(), tt.notErr) {
				t.Errorf("New: error %q leaks %q", err, tt.notErr)
			}
		})
	}
}

func TestClaimDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		items    map[string]int // id → close_at offset ms
		now      int            // offset ms
		limit    int
		want     []string       // claimed, in order
		wantLeft map[string]int // the set afterwards
	}{
		{
			name:     "empty queue",
			items:    nil,
			now:      1000,
			limit:    10,
			want:     nil,
			wantLeft: map[string]int{},
		},
		{
			name:     "only due ids, earliest first",
			items:    map[string]int{"c": 30, "a": 10, "b": 20, "late": 31, "later": 5000},
			now:      30,
			limit:    10,
			want:     []string{"a", "b", "c"},
			wantLeft: map[string]int{"late": 31, "later": 5000},
		},
		{
			name:     "limit respected",
			items:    map[string]int{"e": 50, "d": 40, "c": 30, "b": 20, "a": 10, "f": 9000},
			now:      100,
			limit:    3,
			want:     []string{"a", "b", "c"},
			wantLeft: map[string]int{"d": 40, "e": 50, "f": 9000},
		},
		{
			name:     "close_at equal to now is due, one ms later is not",
			items:    map[string]int{"edge": 100, "next": 101},
			now:      100,
			limit:    10,
			want:     []string{"edge"},
			wantLeft: map[string]int{"next": 101},
		},
		{
			name:     "nothing due",
			items:    map[string]int{"a": 10, "b": 20},
			now:      9,
			limit:    10,
			want:     nil,
			wantLeft: map[string]int{"a": 10, "b": 20},
		},
		{
			name:     "limit zero claims nothing",
			items:    map[string]int{"a": 10},
			now:      100,
			limit:    0,
			want:     nil,
			wantLeft: map[string]int{"a": 10},
		},
		{
			name:     "equal scores in id order",
			items:    map[string]int{"y": 10, "x": 10, "z": 10},
			now:      10,
			limit:    2,
			want:     []string{"x", "y"},
			wantLeft: map[string]int{"z": 10},
		},
		{
			// More than one ZREM chunk (500) inside the script, and more than one ZADD chunk.
			name:     "large batch",
			items:    numbered(1500, 0, 1),
			now:      1499,
			limit:    1200,
			want:     ids("o", 0, 1200),
			wantLeft: dropBelow(numbered(1500, 0, 1), "o1200"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if len(tt.items) > 0 {
				b.add(t, tt.items)
			}
			got, err := b.q.ClaimDue(t.Context(), at(tt.now), tt.limit)
			if err != nil {
				t.Fatalf("ClaimDue: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("claimed: got %v, want %v", got, tt.want)
			}
			if left := b.state(t); !maps.Equal(left, tt.wantLeft) {
				t.Errorf("left: got %v, want %v", left, tt.wantLeft)
			}
		})
	}
}

func TestClaimDueSubMillisecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// close_at 100.7 ms is stored as 100 ms; it is due at now = 100.2 ms (same millisecond).
	item := closer.DelayItem{OrderID: "a", CloseAt: at(100).Add(700 * time.Microsecond)}
	if err := b.q.Add(t.Context(), []closer.DelayItem{item}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got, err := b.q.ClaimDue(t.Context(), at(99).Add(999*time.Microsecond), 10); err != nil || len(got) != 0 {
		t.Fatalf("ClaimDue before: got %v, %v; want none", got, err)
	}
	got, err := b.q.ClaimDue(t.Context(), at(100).Add(200*time.Microsecond), 10)
	if err != nil || !slices.Equal(got, []string{"a"}) {
		t.Fatalf("ClaimDue at: got %v, %v; want [a]", got, err)
	}
}

func TestClaimDueConcurrent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		due       int
		future    int
		claimers  int
		limit     int
		wantTotal int
	}{
		{"4 claimers, 1000 due", 1000, 0, 4, 25, 1000},
		{"8 claimers, 1000 due, 200 not due", 1000, 200, 8, 7, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			items := numbered(tt.due, 0, 1)
			for i := range tt.future {
				items[fmt.Sprintf("f%04d", i)] = 1_000_000 + i
			}
			b.add(t, items)
			now := at(tt.due)

			var (
				mu     sync.Mutex
				counts = map[string]int{}
				errs   = make(chan error, tt.claimers)
				wg     sync.WaitGroup
			)
			for range tt.claimers {
				wg.Go(func() {
					for {
						got, err := b.q.ClaimDue(t.Context(), now, tt.limit)
						if err != nil {
							errs <- err
							return
						}
						if len(got) > tt.limit {
							errs <- fmt.Errorf("claimed %d ids, limit %d", len(got), tt.limit)
							return
						}
						if len(got) == 0 {
							return
						}
						mu.Lock()
						for _, id := range got {
							counts[id]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("claimer: %v", err)
			}
			if len(counts) != tt.wantTotal {
				t.Errorf("distinct ids claimed: got %d, want %d", len(counts), tt.wantTotal)
			}
			for id, n := range counts {
				if n != 1 || !strings.HasPrefix(id, "o") {
					t.Errorf("id %s claimed %d times, want once and only due ids", id, n)
				}
			}
			if n, err := b.q.Len(t.Context()); err != nil || n != int64(tt.future) {
				t.Errorf("Len after claims: got %d, %v; want %d", n, err, tt.future)
			}
		})
	}
}

func TestAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		first   map[string]int
		then    []closer.DelayItem
		want    map[string]int
		wantErr string
	}{
		{
			name:  "re-add moves the score later and earlier",
			first: map[string]int{"a": 10, "b": 20, "c": 30},
			then:  []closer.DelayItem{{OrderID: "a", CloseAt: at(500)}, {OrderID: "c", CloseAt: at(5)}},
			want:  map[string]int{"a": 500, "b": 20, "c": 5},
		},
		{
			name:  "repeated id in one call: last wins",
			first: nil,
			then:  []closer.DelayItem{{OrderID: "a", CloseAt: at(1)}, {OrderID: "a", CloseAt: at(2)}},
			want:  map[string]int{"a": 2},
		},
		{
			name:  "empty add is a no-op",
			first: map[string]int{"a": 10},
			then:  nil,
			want:  map[string]int{"a": 10},
		},
		{
			name:  "many items across chunks",
			first: nil,
			then:  delayItems(numbered(2500, 0, 3)),
			want:  numbered(2500, 0, 3),
		},
		{
			name:    "empty id rejected before writing",
			first:   map[string]int{"a": 10},
			then:    []closer.DelayItem{{OrderID: "b", CloseAt: at(1)}, {OrderID: "", CloseAt: at(2)}},
			want:    map[string]int{"a": 10},
			wantErr: "empty OrderID",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if len(tt.first) > 0 {
				b.add(t, tt.first)
			}
			err := b.q.Add(t.Context(), tt.then)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Add: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Add: got error %v, want %q", err, tt.wantErr)
			}
			if got := b.state(t); !maps.Equal(got, tt.want) {
				t.Errorf("state: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScores(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		items map[string]int
		ids   []string
		want  map[string]int
	}{
		{"present and missing", map[string]int{"a": 10, "b": -20, "c": 30}, []string{"a", "missing", "b"}, map[string]int{"a": 10, "b": -20}},
		{"all missing", map[string]int{"a": 10}, []string{"x", "y"}, map[string]int{}},
		{"no ids", map[string]int{"a": 10}, nil, map[string]int{}},
		{"repeated id", map[string]int{"a": 10}, []string{"a", "a"}, map[string]int{"a": 10}},
		{"many ids across chunks", numbered(2100, 7, 2), append(ids("o", 0, 2100), ids("x", 0, 50)...), numbered(2100, 7, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, tt.items)
			got, err := b.q.Scores(t.Context(), tt.ids)
			if err != nil {
				t.Fatalf("Scores: %v", err)
			}
			want := make(map[string]time.Time, len(tt.want))
			for id, ms := range tt.want {
				want[id] = at(ms)
			}
			if !maps.EqualFunc(got, want, time.Time.Equal) {
				t.Errorf("Scores: got %v, want %v", got, want)
			}
			for id, ts := range got {
				if ts.Location() != time.UTC {
					t.Errorf("Scores[%s] location %v, want UTC", id, ts.Location())
				}
			}
		})
	}
}

func TestScoresZeroTime(t *testing.T) {
	t.Parallel()
	// A real score of 0 (the unix epoch) must not be confused with a missing member.
	b := setup(t)
	if err := b.q.Add(t.Context(), []closer.DelayItem{{OrderID: "epoch", CloseAt: time.UnixMilli(0)}}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	got, err := b.q.Scores(t.Context(), []string{"epoch", "missing"})
	if err != nil {
		t.Fatalf("Scores: %v", err)
	}
	want := map[string]time.Time{"epoch": time.UnixMilli(0).UTC()}
	if !maps.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("Scores: got %v, want %v", got, want)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		items  map[string]int
		remove []string
		want   map[string]int
	}{
		{"some ids", map[string]int{"a": 1, "b": 2, "c": 3}, []string{"a", "c"}, map[string]int{"b": 2}},
		{"missing ids ignored", map[string]int{"a": 1}, []string{"x", "a", "y"}, map[string]int{}},
		{"no ids", map[string]int{"a": 1}, nil, map[string]int{"a": 1}},
		{"many ids across chunks", numbered(2300, 0, 1), ids("o", 0, 2200), dropBelow(numbered(2300, 0, 1), "o2200")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.add(t, tt.items)
			if err := b.q.Remove(t.Context(), tt.remove); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if got := b.state(t); !maps.Equal(got, tt.want) {
				t.Errorf("state: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEarliestLen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	type snapshot struct {
		earliest time.Time
		ok       bool
		n        int64
	}
	look := func() snapshot {
		t.Helper()
		e, ok, err := b.q.Earliest(ctx)
		if err != nil {
			t.Fatalf("Earliest: %v", err)
		}
		n, err := b.q.Len(ctx)
		if err != nil {
			t.Fatalf("Len: %v", err)
		}
		return snapshot{e, ok, n}
	}
	steps := []struct {
		name string
		do   func() error
		want snapshot
	}{
		{"empty", func() error { return nil }, snapshot{time.Time{}, false, 0}},
		{"added", func() error {
			return b.q.Add(ctx, delayItems(map[string]int{"a": 30, "b": 10, "c": 20}))
		}, snapshot{at(10), true, 3}},
		{"earlier deadline added", func() error {
			return b.q.Add(ctx, delayItems(map[string]int{"d": -5}))
		}, snapshot{at(-5), true, 4}},
		{"earliest moved later", func() error {
			return b.q.Add(ctx, delayItems(map[string]int{"d": 25}))
		}, snapshot{at(10), true, 4}},
		{"two claimed", func() error {
			_, err := b.q.ClaimDue(ctx, at(100), 2)
			return err
		}, snapshot{at(25), true, 2}},
		{"removed", func() error { return b.q.Remove(ctx, []string{"d"}) }, snapshot{at(30), true, 1}},
		{"drained", func() error {
			_, err := b.q.ClaimDue(ctx, at(100), 10)
			return err
		}, snapshot{time.Time{}, false, 0}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := look()
		if !got.earliest.Equal(s.want.earliest) || got.ok != s.want.ok || got.n != s.want.n {
			t.Errorf("%s: got %+v, want %+v", s.name, got, s.want)
		}
		if got.ok && got.earliest.Location() != time.UTC {
			t.Errorf("%s: Earliest location %v, want UTC", s.name, got.earliest.Location())
		}
	}
}

func TestClientOwnership(t *testing.T) {
	t.Parallel()
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	client := redis.NewClient(opts)
	prefix := "orderlytest-" + rand.Text()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Del(ctx, dueKey(prefix)).Err()
		_ = client.Close()
	})
	q, err := New(t.Context(), Config{Client: client, Prefix: prefix})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := q.Add(t.Context(), []closer.DelayItem{{OrderID: "a", CloseAt: at(1)}}); err != nil {
		t.Fatalf("Add: %v", err)
	}
	for i := range 2 { // Close is idempotent
		if err := q.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	// The caller's client stays open and sees the queue's key.
	if n, err := client.ZCard(t.Context(), dueKey(prefix)).Result(); err != nil || n != 1 {
		t.Errorf("ZCARD via caller's client after Close: got %d, %v; want 1, nil", n, err)
	}
}

func TestDefaultPrefix(t *testing.T) {
	t.Parallel()
	u := redisURL(t)
	q, err := New(t.Context(), Config{URL: u})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer q.Close()
	// Read-only: the default prefix may be in use on the shared server.
	if want := dueKey(DefaultPrefix); q.due != want {
		t.Errorf("key: got %q, want %q", q.due, want)
	}
}

// TestLazy checks that a Lazy queue is made while Redis is unreachable, that its commands
// and Ping fail meanwhile with the address and without the password, and that it works
// once Redis answers, with no new queue: a server starts while its delay queue is down and
// uses it when it is back.
func TestLazy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	// No command retries: each failure here would take go-redis's 4 tries (about 2.5 s).
	q, err := New(t.Context(), Config{URL: "redis://:s3cret@" + dead + "/0?max_retries=-1", Lazy: true})
	if err != nil {
		t.Fatalf("New(Lazy) with Redis down: %v", err)
	}
	defer q.Close()
	err = q.Ping(t.Context())
	if err == nil || !strings.Contains(err.Error(), "redis at "+dead+" is unreachable") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Ping with Redis down: %v, want unreachable naming %s without the password", err, dead)
	}
	if err := q.Add(t.Context(), delayItems(map[string]int{"a": 1})); err == nil {
		t.Error("Add with Redis down succeeded")
	}
	if _, err := New(t.Context(), Config{URL: "redis://" + dead + "/0", Lazy: true, Prefix: "a{b"}); err == nil {
		t.Error("New(Lazy) accepted a bad prefix")
	}
}

// TestLazyRecovers checks that a Lazy queue made while Redis is cut off works once Redis
// answers again, without a new queue.
func TestLazyRecovers(t *testing.T) {
	t.Parallel()
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := fault.StartProxy(t.Context(), opts.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.Cut(time.Hour)
	lazy := *opts
	lazy.Addr = proxy.Addr()
	client := redis.NewClient(&lazy)
	defer client.Close()
	prefix := "orderlytest-" + rand.Text()
	q, err := New(t.Context(), Config{Client: client, Prefix: prefix, Lazy: true})
	if err != nil {
		t.Fatalf("New(Lazy) with Redis cut off: %v", err)
	}
	defer q.Close()
	defer client.Del(context.Background(), dueKey(prefix))
	if err := q.Ping(t.Context()); err == nil {
		t.Fatal("Ping through a cut proxy succeeded")
	}
	proxy.Cut(0) // Redis is back
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for q.Ping(ctx) != nil {
		if ctx.Err() != nil {
			t.Fatalf("Ping still fails 10 s after Redis came back: %v", q.Ping(t.Context()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := q.Add(t.Context(), delayItems(map[string]int{"a": 1})); err != nil {
		t.Fatalf("Add after Redis came back: %v", err)
	}
	if at, ok, err := q.Earliest(t.Context()); err != nil || !ok || !at.Equal(base.Add(time.Millisecond)) {
		t.Errorf("Earliest = %v, %v, %v; want %v", at, ok, err, base.Add(time.Millisecond))
	}
}
