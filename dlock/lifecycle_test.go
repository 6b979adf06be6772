package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// A Refresh whose outcome is unknown (its context ended while Redis was paused) makes the
// lock count on the shorter lease; the watchdog then renews it before that lease ends, so
// a healthy, watchdog-renewed lock is not lost. Before, its next renewal stayed a third of
// the Client lease away and the shortened lease ran out first.
func TestUnknownRefreshIsFollowedByRenewal(t *testing.T) {
	srv, _, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key) // Client lease 30 s: the watchdog renews after 10 s
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	if err := lk.Refresh(ctx, 30*time.Second); err != nil { // loads the renew script
		t.Fatal(err)
	}
	if err := srv.Pause(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	rerr := lk.Refresh(rctx, 2*time.Second)
	cancel()
	if !errors.Is(rerr, dlock.ErrUnavailable) {
		t.Fatalf("precondition: Refresh against a paused Redis returned %v, want ErrUnavailable", rerr)
	}
	select {
	case <-lk.Done():
		t.Fatalf("lock lost after a Refresh of unknown outcome: %v", lk.Err())
	case <-time.After(4 * time.Second): // twice the shortened lease
	}
}

// Close while waiters are in line, of the closing Client or with the holder in it: each
// waiter takes its place out of line before Close returns, so the holder's release frees
// the key. Before, the release handed the lock to a waiter that was gone, and the key stayed
// blocked for the claim lease (3 s by default).
func TestCloseTakesWaitersOutOfLine(t *testing.T) {
	for _, sameClient := range []bool{false, true} {
		name := map[bool]string{false: "waiter in another Client", true: "waiter in the holder's Client"}[sameClient]
		t.Run(name, func(t *testing.T) {
			_, rdb, c := setup(t)
			ctx := testContext(t, 20*time.Second)
			key := uniqueKey(t)
			waiters := dlock.New(rdb)
			holders := c
			if sameClient {
				holders = waiters
			}
			holder, err := holders.Acquire(ctx, key, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() {
				_, err := waiters.Acquire(ctx, key)
				res <- err
			}()
			waitQueued(t, rdb, ctx, key)
			_ = waiters.Close()
			if err := <-res; !errors.Is(err, dlock.ErrClosed) {
				t.Fatalf("waiter: %v, want ErrClosed", err)
			}
			if n := rdb.ZCard(ctx, redisName(key, "q")).Val(); n != 0 {
				t.Fatalf("%d waiters in line after Close returned", n)
			}
			if err := holder.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lk, err := newClient(t, rdb).TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("key not free after the holder released: %v", err)
			}
			_ = lk.Release(ctx)
		})
	}
}

// Complete on a re-entrant (inner) hold while the outer hold remains tells the waiters that
// skip completed work at once, as Complete's doc says; they need not wait for the outer
// release or their next look (30 s here).
func TestInnerCompleteTellsSkipWaiters(t *testing.T) {
	_, rdb, c := setup(t)
	w := newClient(t, rdb, dlock.WithRetryInterval(30*time.Second))
	ctx := testContext(t, 60*time.Second)
	key := uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outer.Release(ctx) }()
	res := make(chan error, 1)
	go func() {
		lk, err := w.Acquire(ctx, key, dlock.SkipCompleted())
		if err == nil {
			_ = lk.Release(ctx)
		}
		res <- err
	}()
	waitQueued(t, rdb, ctx, key)
	inner, err := c.Acquire(dlock.WithLock(ctx, outer), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Complete(ctx, []byte("paid"), time.Hour); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		var done *dlock.CompletedError
		if !errors.As(err, &done) || string(done.Record) != "paid" {
			t.Fatalf("waiter: %v, want the completion record", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SkipCompleted waiter not told of the inner Complete while the outer hold remained")
	}
}

// A re-entrant Acquire whose context has ended answers as a first acquisition does (an
// error matching ErrNotObtained and the context's error), not that the store is unavailable,
// and adds no hold.
func TestReentryWithEndedContext(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outer.Release(ctx) }()
	cctx, cancel := context.WithCancel(dlock.WithLock(ctx, outer))
	cancel()
	_, err = c.Acquire(cctx, key)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("re-entry with a cancelled context: %v; want ErrNotObtained and context.Canceled, not ErrUnavailable", err)
	}
	if n := outer.HoldCount(); n != 1 {
		t.Fatalf("hold count %d after the failed re-entry, want 1", n)
	}
}

// Do's fn may end its hold itself with Complete: Do then returns nil, not the ErrNotHeld of
// its own release; a lost lock is still reported.
func TestDoWithCompleteInside(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	err := c.Do(ctx, key, func(ctx context.Context) error {
		lk, _ := dlock.FromContext(ctx)
		return lk.Complete(ctx, []byte("done"), time.Minute)
	})
	if err != nil {
		t.Fatalf("Do with Complete inside: %v, want nil", err)
	}
	if rec, ok, err := c.Completed(ctx, key); err != nil || !ok || string(rec) != "done" {
		t.Fatalf("Completed: %q %v %v", rec, ok, err)
	}
	err = c.Do(ctx, uniqueKey(t), func(ctx context.Context) error {
		time.Sleep(3 * dlock.MinLease) // past the lease
		return nil
	}, dlock.WithTTL(dlock.MinLease))
	if !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Do whose lease ran out: %v, want ErrLockLost", err)
	}
}
