package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// lostReenterReply runs the re-entry script but loses its reply (a connection reset after
// the script ran, or a deadline while the call was in flight), holds the clean-up release of
// that re-entry hold (dropHold, a background call on another connection) until gate closes,
// and counts renewals.
type lostReenterReply struct {
	backend
	gate    chan struct{}
	dropped chan error // the clean-up release of the re-entry hold, once it got through
	renews  atomic.Int64
}

func (b *lostReenterReply) reenter(ctx context.Context, r reentryRequest) (int, []byte, error) {
	if _, _, err := b.backend.reenter(ctx, r); err != nil {
		return 0, nil, err
	}
	return 0, nil, unavailable("reenter", errors.New("injected: reply lost after the script ran"))
}

func (b *lostReenterReply) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	if r.entry == "1" {
		return b.backend.release(ctx, r)
	}
	<-b.gate
	res, err := b.backend.release(ctx, r)
	select {
	case b.dropped <- err:
	default:
	}
	return res, err
}

func (b *lostReenterReply) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	b.renews.Add(1)
	return b.backend.renew(ctx, rs)
}

// Release of the only hold the caller knows of, while Redis still counts the hold a failed
// re-entry added (its dropHold clean-up has not run yet), answers "holds left", and the lease
// is watched again. No hold is left locally, so the watchdog must not renew it back to back:
// it retries later, and the clean-up ends the lease once it frees the lock.
func TestReleasedLeaseDoesNotSpinWatchdog(t *testing.T) {
	fb := &lostReenterReply{gate: make(chan struct{}), dropped: make(chan error, 1)}
	c, srv, ctx := testClient(t, 3*time.Second, // renewal due 1 s after the re-add
		func(b backend) backend { fb.backend = b; return fb })
	key := t.Name()

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(WithLock(ctx, lk), key); err == nil {
		t.Fatal("re-entry succeeded; the injection did not apply")
	}
	// The outer hold is released before the background dropHold gets through.
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(fb.gate) // dropHold now removes the re-entry hold: the lock is free in Redis
	select {
	case err := <-fb.dropped:
		if err != nil {
			t.Fatalf("the clean-up release of the re-entry hold: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the clean-up release of the re-entry hold never got through")
	}
	if owner, _ := srv.Client(t).HGet(ctx, "lockguard:{"+key+"}:lock", "o").Result(); owner != "" {
		t.Fatalf("lock still owned by %q after both holds were removed", owner)
	}
	before := fb.renews.Load()
	time.Sleep(1500 * time.Millisecond) // the re-added lease comes due after ~0.7-1 s
	n := fb.renews.Load() - before
	t.Logf("renewals sent in 1.5 s for a lease whose every hold was released: %d", n)
	if n > 5 {
		t.Fatalf("the watchdog sent %d renewals in 1.5 s (lease 3 s, one due per 1 s) for a "+
			"lease released by its only known hold: it spins on a lease it re-added after Release", n)
	}
}
