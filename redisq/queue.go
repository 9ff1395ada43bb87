package redisq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderlyhq/orderly/closer"
)

// DefaultPrefix is the key prefix used when Config.Prefix is empty.
const DefaultPrefix = "orderly"

// chunk is the largest number of members one ZADD, ZREM or ZMSCORE command carries; larger
// calls are split into several commands sent in one pipeline.
const chunk = 1000

// dueKey is the sorted set of open orders: member = order id, score = close_at in unix
// milliseconds. The {delay} hash tag keeps every key of the queue in one Cluster slot.
func dueKey(prefix string) string { return prefix + ":{delay}:due" }

// claimScript claims due ids: it reads up to limit members whose score is <= now, lowest
// score first (ties in member order), removes them and returns them. Reading and removing
// in one script makes the claim atomic, so concurrent claimers never get the same id.
// ZREM is sent in chunks of 500 members because Lua's unpack has a bounded stack.
//
// KEYS[1]: the due sorted set (dueKey).
// ARGV[1]: now, unix milliseconds; members with score <= now are due.
// ARGV[2]: limit, the maximum number of members to claim (> 0).
//
// Returns: an array of the claimed members (order ids), earliest first; empty when none is due.
var claimScript = redis.NewScript(`
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, ARGV[2])
for i = 1, #ids, 500 do
	redis.call("ZREM", KEYS[1], unpack(ids, i, math.min(i + 499, #ids)))
end
return ids
`)

// Config configures a Queue. Exactly one of URL and Client must be set.
type Config struct {
	// URL is the Redis URL, e.g. redis://127.0.0.1:6379/0 or rediss://user:pass@host:6380/1
	// (the syntax of redis.ParseURL). The Queue owns the client it creates and closes it in Close.
	URL string
	// Prefix starts every key of the queue; "orderly" when empty. It must not contain '{' or
	// '}' (the keys carry their own hash tag). Use distinct prefixes for distinct queues.
	Prefix string
	// Client, instead of URL, is a client the caller owns (a *redis.Client, *redis.ClusterClient
	// or failover client); Close does not close it.
	Client redis.UniversalClient
	// Lazy has New return without pinging Redis: while it is unreachable every command
	// fails (the client dials again on the next one), and Ping says when it answers. For a
	// server that must take traffic while its optional delay queue is down (the database
	// timer and the sweep close orders meanwhile). Errors of the URL and Prefix are still
	// returned.
	Lazy bool
}

// Queue is a delay queue of order ids on one Redis sorted set. It is safe for concurrent use
// by several goroutines and several processes sharing the same Redis and Prefix.
type Queue struct {
	client redis.UniversalClient
	owned  bool   // the client was created from Config.URL and is closed by Close
	addr   string // the server address for errors (never the password)
	due    string

	closeOnce sync.Once
	closeErr  error
}

var _ closer.DelayQueue = (*Queue)(nil)

// New connects to Redis as cfg says and pings it (not with cfg.Lazy). It returns an error
// when cfg sets neither or both of URL and Client, when the URL or Prefix is invalid, or
// when Redis does not answer the ping before ctx ends; the error names the server address
// (never the password).
func New(ctx context.Context, cfg Config) (*Queue, error) {
	prefix := cmp.Or(cfg.Prefix, DefaultPrefix)
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisq: Config.Prefix %q must not contain '{' or '}'", prefix)
	}
	var (
		client redis.UniversalClient
		owned  bool
		addr   string
	)
	switch {
	case cfg.URL != "" && cfg.Client != nil:
		return nil, errors.New("redisq: set Config.URL or Config.Client, not both")
	case cfg.Client != nil:
		client = cfg.Client
		addr = "the configured client"
	case cfg.URL != "":
		opts, err := redis.ParseURL(cfg.URL)
		if err != nil {
			// A *url.Error quotes the whole URL, password included: keep only its cause.
			if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, fmt.Errorf("redisq: parse Config.URL: %w", err)
		}
		client, owned, addr = redis.NewClient(opts), true, opts.Addr
	default:
		return nil, errors.New("redisq: Config.URL or Config.Client is required")
	}
	q := &Queue{client: client, owned: owned, addr: addr, due: dueKey(prefix)}
	if cfg.Lazy {
		return q, nil
	}
	if err := q.Ping(ctx); err != nil {
		_ = q.Close()
		return nil, err
	}
	return q, nil
}

// Ping reports whether Redis answers a PING before ctx ends; the error names the server
// address (never the password).
func (q *Queue) Ping(ctx context.Context) error {
	if err := q.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisq: redis at %s is unreachable: ping: %w", q.addr, err)
	}
	return nil
}

// Close releases the client created from Config.URL; a Config.Client stays open. Close is
// idempotent: later calls return the first call's result.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		if q.owned {
			if err := q.client.Close(); err != nil {
				q.closeErr = fmt.Errorf("redisq: close: %w", err)
			}
		}
	})
	return q.closeErr
}

// Add records items with ZADD, chunk members per command in one pipeline; an id already
// present moves to its new CloseAt (the last one when ids repeats in items). CloseAt is
// stored in unix milliseconds (sub-millisecond parts are dropped). It returns an error for an
// empty OrderID, before writing anything.
func (q *Queue) Add(ctx context.Context, items []closer.DelayItem) error {
	if len(items) == 0 {
		return nil
	}
	for _, it := range items {
		if it.OrderID == "" {
			return errors.New("redisq: add: empty OrderID")
		}
	}
	_, err := q.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part := range slices.Chunk(items, chunk) {
			zs := make([]redis.Z, len(part))
			for i, it := range part {
				zs[i] = redis.Z{Score: float64(it.CloseAt.UnixMilli()), Member: it.OrderID}
			}
			p.ZAdd(ctx, q.due, zs...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisq: add %d items: %w", len(items), err)
	}
	return nil
}

// ClaimDue atomically removes and returns up to limit ids whose CloseAt <= now (compared in
// unix milliseconds), earliest first, with one run of claimScript. A claimed id is gone from
// the queue: a caller that does not close it must Add it again. limit <= 0 claims nothing.
func (q *Queue) ClaimDue(ctx context.Context, now time.Time, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	ids, err := claimScript.Run(ctx, q.client, []string{q.due}, now.UnixMilli(), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisq: claim due (limit %d): %w", limit, err)
	}
	return ids, nil
}

// Scores returns the CloseAt (UTC, millisecond precision) recorded for each of ids, read with
// ZMSCORE; ids the queue lacks are absent from the map.
func (q *Queue) Scores(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var cmds []*redis.Cmd
	var parts [][]string
	_, err := q.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part := range slices.Chunk(ids, chunk) {
			args := make([]any, 0, 2+len(part))
			args = append(args, "zmscore", q.due)
			for _, id := range part {
				args = append(args, id)
			}
			// Do, not ZMScore: go-redis reports a missing member as score 0, which we could not
			// tell from a real score.
			cmds = append(cmds, p.Do(ctx, args...))
			parts = append(parts, part)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisq: scores of %d ids: %w", len(ids), err)
	}
	for i, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil {
			return nil, fmt.Errorf("redisq: scores of %d ids: %w", len(ids), err)
		}
		if len(vals) != len(parts[i]) {
			return nil, fmt.Errorf("redisq: scores: ZMSCORE returned %d values for %d ids", len(vals), len(parts[i]))
		}
		for j, v := range vals {
			if v == nil {
				continue // missing member
			}
			ms, err := parseScore(v)
			if err != nil {
				return nil, fmt.Errorf("redisq: score of %s: %w", parts[i][j], err)
			}
			out[parts[i][j]] = time.UnixMilli(ms).UTC()
		}
	}
	return out, nil
}

// Remove deletes ids with ZREM, chunk members per command in one pipeline; missing ids are
// ignored.
func (q *Queue) Remove(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := q.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for part := range slices.Chunk(ids, chunk) {
			members := make([]any, len(part))
			for i, id := range part {
				members[i] = id
			}
			p.ZRem(ctx, q.due, members...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisq: remove %d ids: %w", len(ids), err)
	}
	return nil
}

// Len returns the number of ids in the queue (ZCARD), due or not.
func (q *Queue) Len(ctx context.Context) (int64, error) {
	n, err := q.client.ZCard(ctx, q.due).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: len: %w", err)
	}
	return n, nil
}

// Earliest returns the smallest CloseAt in the queue (UTC, millisecond precision) and true,
// or the zero time and false when the queue is empty (ZRANGE 0 0 WITHSCORES). The closer
// sleeps until it; the result may already be in the past.
func (q *Queue) Earliest(ctx context.Context) (time.Time, bool, error) {
	zs, err := q.client.ZRangeWithScores(ctx, q.due, 0, 0).Result()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("redisq: earliest: %w", err)
	}
	if len(zs) == 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(int64(zs[0].Score)).UTC(), true, nil
}

// parseScore converts a ZMSCORE value to unix milliseconds: a float64 under RESP3, a
// string under RESP2.
func parseScore(v any) (int64, error) {
	switch s := v.(type) {
	case float64:
		return int64(s), nil
	case string:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", s, err)
		}
		return int64(f), nil
	default:
		return 0, fmt.Errorf("unexpected type %T", v)
	}
}
