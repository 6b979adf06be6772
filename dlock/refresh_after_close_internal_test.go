package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// firstRenewHeld holds back the first renew call: it is given up at its context's end while
// it goes on (as go-redis without ContextTimeoutEnabled lets it), and reaches Redis only once
// apply is closed. It counts the renew calls sent while that first one is still on its way.
type firstRenewHeld struct {
	backend
	apply    chan struct{}
	taken    atomic.Bool
	onWay    atomic.Bool
	crossing atomic.Int64
}

func (b *firstRenewHeld) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	if !b.taken.CompareAndSwap(false, true) {
		if b.onWay.Load() {
			b.crossing.Add(1)
		}
		return b.backend.renew(ctx, rs)
	}
	b.onWay.Store(true)
	finished := make(chan struct{})
	var ok []bool
	var err error
	go func() {
		defer close(finished)
		<-b.apply
		ok, err = b.backend.renew(context.WithoutCancel(ctx), rs)
		b.onWay.Store(false)
	}()
	<-ctx.Done()
	return nil, lateAnswer(unavailable("renew", ctx.Err()), len(rs), func() ([]bool, []bool) {
		<-finished
		failed := make([]bool, len(rs))
		for i := range failed {
			failed[i] = renewFailed(err, i)
		}
		return ok, failed
	})
}

// A lock taken WithTTL keeps its lease after Close (see Client.Close), so its holder may still
// Refresh it. A Refresh given up by its context while its call is still on its way must keep
// the lease's renewing token until that call is over, so that no second renewal crosses it
// (see lease.renewing), also once Close has begun, which takes no more background work.
// Were the token given back at once, a second Refresh would be sent while the first is still
// on its way: Redis would apply the first one last, with its shorter ttl, while the holder's
// clock followed the second one's answer, and the holder would believe it held the lock for a
// minute while Redis let another client take it.
func TestRefreshAfterCloseDoesNotCross(t *testing.T) {
	held := &firstRenewHeld{apply: make(chan struct{})}
	c, srv, ctx := testClient(t, DefaultLease, func(b backend) backend { held.backend = b; return held })
	applied := false
	defer func() {
		if !applied {
			close(held.apply)
		}
	}()
	other := New(srv.Client(t))
	defer other.Close()

	key := t.Name()
	lk, err := c.Acquire(ctx, key, WithTTL(5*time.Second)) // not renewed by the watchdog: kept at Close
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("precondition: a WithTTL lock keeps its lease at Close: %v", err)
	}

	// Refresh 1, to 300 ms: given up after 50 ms, its call still on its way.
	rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer rcancel()
	if err := lk.Refresh(rctx, 300*time.Millisecond); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("precondition: Refresh given up on its way: %v, want ErrUnavailable", err)
	}
	// Refresh 2, to a minute, while Refresh 1's call is still on its way: it must wait for it
	// (and here give up at its own context's end), not cross it.
	r2ctx, r2cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer r2cancel()
	err2 := lk.Refresh(r2ctx, time.Minute)
	// Refresh 1's call reaches Redis now, after Refresh 2's: Redis keeps the lock 300 ms.
	close(held.apply)
	applied = true
	if n := held.crossing.Load(); n != 0 {
		t.Errorf("%d renewal(s) sent while an earlier Refresh's call was still on its way (second Refresh: %v)", n, err2)
	}
	time.Sleep(600 * time.Millisecond) // a deliberate window: past the late 300 ms lease in Redis
	if lk.Err() == nil {
		if lk2, err := other.TryAcquire(ctx, key); err == nil {
			_ = lk2.Release(ctx)
			lk.l.mu.Lock()
			left := time.Until(lk.l.deadline)
			lk.l.mu.Unlock()
			t.Fatalf("two holders: another client took the lock while its holder still holds it (Err nil, %v left on its clock)",
				left.Round(time.Second))
		}
	}
	_ = lk.Release(ctx)
}
