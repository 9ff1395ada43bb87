package idempotency_test

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/idempotency"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// TestRequestHash: a JSON body encoded another way (key order, spacing) is the same
// request; another value, method, path or query is not; a body that is not JSON counts
// byte for byte.
func TestRequestHash(t *testing.T) {
	h := idempotency.RequestHash
	base := h("POST", "/v1/trips", []byte(`{"a":1,"b":[1,2],"c":{"x":"y"}}`))
	if got := h("POST", "/v1/trips", []byte(" {\"c\": {\"x\": \"y\"}, \"b\": [1, 2], \"a\": 1}\n")); got != base {
		t.Errorf("re-encoded JSON hashes %s, want %s", got, base)
	}
	for _, other := range []string{
		h("POST", "/v1/trips", []byte(`{"a":2,"b":[1,2],"c":{"x":"y"}}`)),
		h("POST", "/v1/trips", []byte(`{"a":1,"b":[2,1],"c":{"x":"y"}}`)),
		h("POST", "/v1/trips?x=1", []byte(`{"a":1,"b":[1,2],"c":{"x":"y"}}`)),
		h("POST", "/v1/coupons", []byte(`{"a":1,"b":[1,2],"c":{"x":"y"}}`)),
		h("PUT", "/v1/trips", []byte(`{"a":1,"b":[1,2],"c":{"x":"y"}}`)),
		h("POST", "/v1/trips", []byte(`{"a":1.0,"b":[1,2],"c":{"x":"y"}}`)), // another number as written
	} {
		if other == base {
			t.Errorf("another request hashes as the first: %s", other)
		}
	}
	if h("POST", "/x", []byte("a b")) == h("POST", "/x", []byte("a  b")) {
		t.Error("bodies that are not JSON hash alike")
	}
}

// TestRetentionFreesExpiredKeys: the retention job deletes answers past their TTL, and
// only those; a key whose answer was deleted may serve another request.
func TestRetentionFreesExpiredKeys(t *testing.T) {
	t.Parallel()
	env := enginetest.New(t, enginetest.Options{})
	svc, err := idempotency.New(idempotency.Config{Store: env.Store, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	hash := func(body string) string { return idempotency.RequestHash("POST", "/v1/coupons", []byte(body)) }
	answer := &idempotency.Answer{Status: 201, ContentType: "application/json", Body: []byte(`{"id":"c1"}`)}
	for _, key := range []string{"old", "new"} {
		claim, _, err := svc.Begin(ctx, "POST /v1/coupons", key, hash(key))
		if err != nil {
			t.Fatal(err)
		}
		if err := claim.Complete(ctx, answer); err != nil {
			t.Fatal(err)
		}
		env.Clock.Advance(40 * time.Second)
	}
	// "old" was kept at +0 s, "new" at +40 s; now is +80 s: only "old" expired.
	if _, deleted, err := svc.Retention(ctx, nil); err != nil || deleted != 1 {
		t.Fatalf("Retention deleted %d, %v; want 1", deleted, err)
	}
	if _, _, err := svc.Begin(ctx, "POST /v1/coupons", "new", hash("another")); orderly.ErrorCode(err) != orderly.EIDEMPOTENCY {
		t.Errorf("the kept key with another request: %v, want %s", err, orderly.EIDEMPOTENCY)
	}
	if claim, kept, err := svc.Begin(ctx, "POST /v1/coupons", "old", hash("another")); err != nil || claim == nil || kept != nil {
		t.Errorf("the expired key with another request: claim %v, kept %v, %v; want a claim", claim, kept, err)
	}
}
