// Package batchctx gives the contexts of a group commit: several callers' work joined into
// one transaction (order creates of one SKU, saga starts on SQLite).
package batchctx

import (
	"context"
	"time"
)

// Batch returns the context of a batch's transaction, given its members and the context
// of each (ctxOf): the first member's values, no cancellation of any member's, and the
// earliest deadline of the members, so that no member's answer comes after its deadline
// and a batch that runs out of time changed nothing. members must not be empty.
func Batch[M any](members []M, ctxOf func(M) context.Context) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(ctxOf(members[0]))
	var deadline time.Time
	for _, m := range members {
		if d, ok := ctxOf(m).Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
			deadline = d
		}
	}
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline)
}

// Member returns a member's context inside its batch: the batch's deadline and
// cancellation (the transaction's), the member's values (its trace span, its logger).
func Member(batch, member context.Context) context.Context { return memberContext{batch, member} }

type memberContext struct {
	context.Context                 // the batch's
	values          context.Context // the member's
}

func (c memberContext) Value(key any) any { return c.values.Value(key) }
