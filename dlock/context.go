package dlock

import (
	"context"
	"reflect"
)

type ctxKey struct{}

// held is the list of locks a context carries.
type held struct {
	lk   *Lock
	next *held
}

// WithLock returns a context that carries lk and ends when ctx ends, when lk is released, or
// when the lease of lk ends (a re-entrant hold shares its lease with the outer one); its cause
// is then ErrLockLost (lost) or ErrNotHeld (released). It ends in the goroutine that
// ends the lease, without a goroutine of its own: once the Release that ends the lease has
// returned, the context is done. Acquire of the same key on the same Client with this context
// re-enters lk instead of waiting for it. Give this context to the work done under the lock,
// so a lost lock stops that work.
//
// The lease keeps each context it returned until that context or the lease ends. A call with
// the same ctx and lk as an earlier one whose context is live returns that context again, so
// a loop that derives a context per unit of work from one long-lived ctx under a long-held
// lock does not accumulate them. It panics if ctx or lk is nil.
func WithLock(ctx context.Context, lk *Lock) context.Context {
	mustContext(ctx, "WithLock")
	if lk == nil {
		panic("dlock: WithLock with a nil Lock")
	}
	var from context.Context
	// The value, not only its type: a comparable type (a struct with an interface field, as
	// context.WithoutCancel's) can hold a value that is not, and comparing it would panic.
	if reflect.ValueOf(ctx).Comparable() {
		if out := lk.l.boundFrom(ctx, lk); out != nil {
			return out
		}
		from = ctx
	}
	cctx, cancel := context.WithCancelCause(ctx)
	prev, _ := ctx.Value(ctxKey{}).(*held)
	out := context.WithValue(cctx, ctxKey{}, &held{lk: lk, next: prev})
	lk.l.bind(bound{ctx: cctx, cancel: cancel, from: from, lk: lk, out: out})
	return out
}

// FromContext returns the innermost lock that ctx carries (see WithLock), for its fencing
// token or key; ok is false when ctx carries none. The lock may have ended since: check Err.
func FromContext(ctx context.Context) (lk *Lock, ok bool) {
	mustContext(ctx, "FromContext")
	if h, _ := ctx.Value(ctxKey{}).(*held); h != nil {
		return h.lk, true
	}
	return nil, false
}

// mustContext panics, naming op, for a nil ctx, before op changes anything: a hold is never
// left half released, nor a lock half taken.
func mustContext(ctx context.Context, op string) {
	if ctx == nil {
		panic("dlock: " + op + " with a nil Context")
	}
}

// heldIn returns the innermost live hold of key by c in ctx.
func heldIn(ctx context.Context, c *Client, key string) *Lock {
	for h, _ := ctx.Value(ctxKey{}).(*held); h != nil; h = h.next {
		if h.lk.l.c == c && h.lk.l.key == key && h.lk.l.err() == nil {
			return h.lk
		}
	}
	return nil
}
