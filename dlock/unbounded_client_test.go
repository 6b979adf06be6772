package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// A Redis client without read timeouts (ReadTimeout -1), with and without
// ContextTimeoutEnabled, works as any other while Redis answers: Close's hold on such a
// client's acquisitions (untilClose) ends with each acquisition and takes nothing from the
// lock it returns. A lock is taken and renewed past its lease, re-entered, refreshed, handed
// to a waiter, and released; Done closes only at the release.
func TestUnboundedClientLocksNormally(t *testing.T) {
	srv := redistest.Start(t)
	for _, ctxTimeouts := range []bool{false, true} {
		name := "ContextTimeoutEnabled=false"
		if ctxTimeouts {
			name = "ContextTimeoutEnabled=true"
		}
		t.Run(name, func(t *testing.T) {
			rdb := srv.Client(t, func(o *redis.Options) { o.ReadTimeout, o.ContextTimeoutEnabled = -1, ctxTimeouts })
			const lease = 600 * time.Millisecond
			c := newClient(t, rdb, dlock.WithLease(lease), dlock.WithRetryInterval(100*time.Millisecond))
			ctx := testContext(t, 20*time.Second)
			key := uniqueKey(t)

			lk, err := c.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * lease) // renewed by the watchdog, not ended
			if err := lk.Err(); err != nil {
				t.Fatalf("lock ended while held past its lease: %v", err)
			}
			lctx := dlock.WithLock(ctx, lk)
			inner, err := c.Acquire(lctx, key)
			if err != nil {
				t.Fatalf("re-entry: %v", err)
			}
			if inner.Token() != lk.Token() {
				t.Fatalf("re-entry token %d, want the outer hold's %d", inner.Token(), lk.Token())
			}
			if err := inner.Release(ctx); err != nil {
				t.Fatalf("release of the re-entry: %v", err)
			}
			if err := lk.Refresh(ctx, lease); err != nil {
				t.Fatalf("refresh: %v", err)
			}

			waiter := acquireOutcome(c, ctx, key)
			waitQueued(t, rdb, ctx, key) // in line: the release hands it the lock
			select {
			case r := <-waiter:
				t.Fatalf("waiter got %v, %v while the lock was held", r.lk, r.err)
			default:
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			select {
			case <-lk.Done():
			default:
				t.Fatal("Done not closed by the release")
			}
			if err := lk.Err(); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Err after release = %v, want ErrNotHeld", err)
			}
			var r acquired
			select {
			case r = <-waiter:
			case <-time.After(10 * time.Second):
				t.Fatal("waiter not handed the lock by the release")
			}
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			if r.lk.Token() <= lk.Token() {
				t.Fatalf("waiter's token %d not above the first holder's %d", r.lk.Token(), lk.Token())
			}
			time.Sleep(2 * lease) // the handed-off lease is confirmed and renewed
			if err := r.lk.Err(); err != nil {
				t.Fatalf("handed-off lock ended while held: %v", err)
			}
			if err := r.lk.Release(context.WithoutCancel(ctx)); err != nil {
				t.Fatalf("waiter's release: %v", err)
			}
		})
	}
}
