package order

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/orderlyhq/orderly/store"
)

// Deferred collects the effects that the transitions run under a context from DeferEffects
// leave to the end of their transaction: a caller that moves many orders in one transaction
// (the failure of a batch of groups at their deadline) applies each deferred effect once,
// over all the orders, as its last statements (Flush). Its use is lock hold time: the stock
// rows of a hot SKU, which every reservation of it waits for, are then held from the
// flush to the commit, not from the first group's release to the end of the batch.
type Deferred struct {
	names   []string                // the deferred effects, in the order Flush runs them
	batches map[string]*EffectBatch // by effect name, once a transition deferred it
}

type deferredKey struct{}

// DeferEffects returns a context under which Machine.Transition does not run the named
// effects but adds the orders they apply to to the returned Deferred; the caller must call
// Flush in the same transaction before it commits. Only effects that read nothing of the
// batch but IDs, Coupons and Params.Now may be deferred (the release effects:
// orderly.EffectReleaseReservations, orderly.EffectReleaseCoupon), and the transitions
// that defer them must share one Now: Flush applies each with the first batch's Params.
func DeferEffects(ctx context.Context, names ...string) (context.Context, *Deferred) {
	d := &Deferred{names: slices.Clone(names), batches: map[string]*EffectBatch{}}
	return context.WithValue(ctx, deferredKey{}, d), d
}

// deferEffect adds b to the deferred effect name and reports whether name is deferred under ctx.
func deferEffect(ctx context.Context, name string, b *EffectBatch) (bool, error) {
	d, _ := ctx.Value(deferredKey{}).(*Deferred)
	if d == nil || !slices.Contains(d.names, name) {
		return false, nil
	}
	acc := d.batches[name]
	if acc == nil {
		acc = &EffectBatch{Machine: b.Machine, Flow: b.Flow, Transition: b.Transition, Coupons: map[string]string{}, Params: b.Params}
		d.batches[name] = acc
	} else if !acc.Params.Now.Equal(b.Params.Now) {
		return true, fmt.Errorf("defer %s: transitions at %s and %s in one deferral", name, acc.Params.Now, b.Params.Now)
	}
	acc.IDs = append(acc.IDs, b.IDs...)
	maps.Copy(acc.Coupons, b.Coupons)
	return true, nil
}

// Flush runs each deferred effect once on all the orders deferred to it, in the order the
// effects were given to DeferEffects, in tx, and forgets them: a second Flush runs nothing.
// Errors: the effects'.
func (d *Deferred) Flush(ctx context.Context, tx store.Tx) error {
	batches := d.batches
	d.batches = map[string]*EffectBatch{}
	for _, name := range d.names {
		b := batches[name]
		if b == nil {
			continue
		}
		fn := b.Machine.effects[name]
		if fn == nil {
			return fmt.Errorf("deferred effect %q is not registered", name)
		}
		if err := fn(ctx, tx, b); err != nil {
			return fmt.Errorf("deferred %s (%d orders): %w", name, len(b.IDs), err)
		}
	}
	return nil
}
