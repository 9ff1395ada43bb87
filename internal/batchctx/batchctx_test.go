package batchctx

import (
	"context"
	"testing"
	"time"
)

type key struct{}

// TestBatchAndMember: the batch ends at its members' earliest deadline, is not cancelled
// with a member, and carries the first member's values; a member's context inside it has
// the batch's deadline and the member's own values.
func TestBatchAndMember(t *testing.T) {
	t.Parallel()
	base := time.Now().Add(time.Hour)
	first, cancelFirst := context.WithDeadline(context.WithValue(t.Context(), key{}, "first"), base.Add(time.Minute))
	defer cancelFirst()
	second, cancelSecond := context.WithDeadline(context.WithValue(t.Context(), key{}, "second"), base)
	defer cancelSecond()
	batch, cancel := Batch([]context.Context{first, second}, ctxOf)
	defer cancel()
	if d, ok := batch.Deadline(); !ok || !d.Equal(base) {
		t.Fatalf("batch deadline %v (%v), want the earliest member's %v", d, ok, base)
	}
	if v := batch.Value(key{}); v != "first" {
		t.Fatalf("batch value %v, want the first member's", v)
	}
	cancelFirst()
	if batch.Err() != nil {
		t.Fatal("the batch was cancelled with its first member")
	}
	m := Member(batch, second)
	if d, _ := m.Deadline(); !d.Equal(base) || m.Value(key{}) != "second" {
		t.Fatalf("member: deadline %v, value %v; want the batch's and its own", d, m.Value(key{}))
	}
	none, cancelNone := Batch([]context.Context{context.Background()}, ctxOf)
	defer cancelNone()
	if _, ok := none.Deadline(); ok {
		t.Fatal("a batch of members without deadlines has one")
	}
}

// ctxOf is Batch's ctxOf for members that are contexts.
func ctxOf(c context.Context) context.Context { return c }
