package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

func TestReentrancy(t *testing.T) {
	_, rdb, c := setup(t)
	other := newClient(t, rdb)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dlock.FromContext(ctx); ok {
		t.Fatal("a plain context carries a lock")
	}
	lctx := dlock.WithLock(ctx, outer)
	if got, ok := dlock.FromContext(lctx); !ok || got != outer {
		t.Fatal("FromContext does not return the lock WithLock put in")
	}
	inner, err := c.Acquire(lctx, key) // would deadlock without re-entry
	if err != nil {
		t.Fatalf("re-entrant Acquire: %v", err)
	}
	if inner.Token() != outer.Token() || outer.HoldCount() != 2 || inner.HoldCount() != 2 {
		t.Fatalf("re-entry: token %d/%d holds %d", inner.Token(), outer.Token(), outer.HoldCount())
	}
	if _, err := other.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("other client while held twice: %v", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if outer.HoldCount() != 1 || outer.Err() != nil {
		t.Fatalf("after inner release: holds %d err %v", outer.HoldCount(), outer.Err())
	}
	if _, err := other.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("inner release freed the key: %v", err)
	}
	// Another owner waiting gets it only after the outer release.
	got := acquireAsync(t, other, ctx, key)
	select {
	case <-got:
		t.Fatal("other owner got the lock while the outer hold is open")
	case <-time.After(200 * time.Millisecond):
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-got
	if lk == nil || lk.Token() <= outer.Token() {
		t.Fatal("other owner did not get the lock with a larger token")
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReentrancyNeedsSameClient(t *testing.T) {
	_, rdb, c := setup(t)
	other := newClient(t, rdb)
	ctx := testContext(t, 5*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	lctx := dlock.WithLock(ctx, lk)
	if _, err := other.TryAcquire(lctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a context from another Client re-entered: %v", err)
	}
	if l2, err := c.TryAcquire(lctx, uniqueKey(t)); err != nil {
		t.Fatalf("another key with a lock context: %v", err)
	} else if l2.HoldCount() != 1 {
		t.Fatalf("another key counted as re-entry: %d", l2.HoldCount())
	} else {
		_ = l2.Release(ctx)
	}
}

func TestDo(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 5*time.Second)
	key := uniqueKey(t)

	var inner *dlock.Lock
	err := c.Do(ctx, key, func(ctx context.Context) error {
		var err error
		inner, err = c.Acquire(ctx, key) // re-enters through the context Do gives
		if err != nil {
			return err
		}
		return inner.Release(ctx)
	})
	if err != nil || inner.HoldCount() != 0 {
		t.Fatalf("Do: %v (inner holds %d)", err, inner.HoldCount())
	}

	want := errors.New("boom")
	if err := c.Do(ctx, key, func(context.Context) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}

	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was not re-raised")
			}
		}()
		_ = c.Do(ctx, key, func(context.Context) error { panic("in fn") })
	}()
	lk, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("lock not released after a panic: %v", err)
	}
	_ = lk.Release(ctx)

	// A nil fn is a programming error, reported before the lock is taken.
	func() {
		defer func() {
			if p := recover(); p != "dlock: Do with a nil fn" {
				t.Fatalf("Do with a nil fn: recovered %v", p)
			}
		}()
		holder, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Release(ctx) }()
		_ = c.Do(ctx, key, nil) // unchecked, it would wait for the held lock first
	}()
}

// A lock lost while fn runs cancels fn's context; fn then returns the context's error, as
// database/sql, net/http and go-redis do. Do's error still says the lock was lost: it matches
// ErrLockLost as well as fn's error, so the caller does not take it for its own cancellation.
func TestDoReportsLossBehindFnError(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	err := c.Do(ctx, key, func(ctx context.Context) error {
		if err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err(); err != nil {
			return err
		}
		lk, _ := dlock.FromContext(ctx)
		if err := lk.Refresh(context.WithoutCancel(ctx), time.Minute); !errors.Is(err, dlock.ErrLockLost) {
			return fmt.Errorf("refresh after the lock key was deleted: %v", err)
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v: want an error matching both dlock.ErrLockLost and fn's context.Canceled", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's own context ended: the test proves nothing")
	}
}

func TestCompleteAndSkipCompleted(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 5*time.Second)
	key := uniqueKey(t)

	lk, err := c.Acquire(ctx, key, dlock.SkipCompleted())
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Complete(ctx, []byte("receipt-1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after Complete: %v", err)
	}
	_, err = c.Acquire(ctx, key, dlock.SkipCompleted())
	var ce *dlock.CompletedError
	if !errors.Is(err, dlock.ErrCompleted) || !errors.As(err, &ce) || string(ce.Record) != "receipt-1" {
		t.Fatalf("Acquire of completed key: %v", err)
	}
	rec, ok, err := c.Completed(ctx, key)
	if err != nil || !ok || string(rec) != "receipt-1" {
		t.Fatalf("Completed: %q %v %v", rec, ok, err)
	}
	// Without SkipCompleted the lock is a plain lock.
	lk, err = c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Release(ctx)
}

// A queued waiter that skips completed work must not be handed a lock whose work was
// completed while it waited.
func TestCompletedWhileWaiting(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key, dlock.SkipCompleted())
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		l2, err := c.Acquire(ctx, key, dlock.SkipCompleted())
		if err == nil {
			_ = l2.Release(ctx)
		}
		res <- err
	}()
	waitQueued(t, rdb, ctx, key) // the waiter is in line when the work is completed
	if err := lk.Complete(ctx, []byte("done"), time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, dlock.ErrCompleted) {
			t.Fatalf("waiter got %v, want ErrCompleted", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not told about the completion")
	}
}

// A WithLock context ends with the lease, in the goroutine that ends it: once Release has
// returned, the work's context is done with cause ErrNotHeld. A context made after the end is
// done from the start, and a context that its parent ended does not end the lock.
func TestWithLockEndsWithRelease(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 5*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	parent, cancelParent := context.WithCancel(ctx)
	early := dlock.WithLock(parent, lk)
	cancelParent()
	<-early.Done()
	if lk.Err() != nil {
		t.Fatalf("ending a work context ended the lock: %v", lk.Err())
	}
	work := dlock.WithLock(ctx, lk)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantDone(t, work, dlock.ErrNotHeld, "the work context when Release returned")
	wantDone(t, early, context.Canceled, "the context its parent ended")
	wantDone(t, dlock.WithLock(ctx, lk), dlock.ErrNotHeld, "WithLock of a released lock")
}

// A re-entrant hold's WithLock context ends when that hold is released, though the outer
// hold keeps the lease; the outer hold's context goes on. So Do nested under a long-held lock
// (a leader running each unit of work with Do on its key) gives fn a context that is done
// when Do returns, and keeps nothing per call.
func TestInnerHoldContextEndsWithItsRelease(t *testing.T) {
	c, ctx, key, outer, octx := holdOuter(t)

	inner, err := c.Acquire(octx, key)
	if err != nil {
		t.Fatal(err)
	}
	ictx := dlock.WithLock(octx, inner)
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantDone(t, ictx, dlock.ErrNotHeld, "the inner hold's context after its release")
	wantDone(t, dlock.WithLock(octx, inner), dlock.ErrNotHeld, "WithLock of the released inner hold")
	if octx.Err() != nil || outer.Err() != nil || outer.HoldCount() != 1 {
		t.Fatalf("outer context %v, lock %v, %d holds: want the outer hold live", octx.Err(), outer.Err(), outer.HoldCount())
	}

	var fnCtx context.Context
	unit := func(ctx context.Context) error {
		fnCtx = ctx
		if lk, ok := dlock.FromContext(ctx); !ok || lk.Token() != outer.Token() || lk.HoldCount() != 2 {
			t.Fatal("fn does not run under a re-entrant hold of the outer lock")
		}
		return nil
	}
	if err := c.Do(octx, key, unit); err != nil {
		t.Fatal(err)
	}
	wantDone(t, fnCtx, dlock.ErrNotHeld, "fn's context when Do returned")

	for range 1000 {
		_ = c.Do(octx, key, unit)
	}
	before := heapAlloc()
	const n = 20_000
	for range n {
		if err := c.Do(octx, key, unit); err != nil {
			t.Fatal(err)
		}
	}
	if per := float64(int64(heapAlloc())-int64(before)) / n; per > 32 {
		t.Errorf("each Do under the long-held lock keeps %.0f bytes until the outer release", per)
	}
	if octx.Err() != nil || outer.HoldCount() != 1 {
		t.Fatalf("outer context %v, %d holds after the units", octx.Err(), outer.HoldCount())
	}
}

// A nested Acquire with SkipCompleted answers the completion record as a first acquisition
// does, without adding a hold: an outer layer that locks the key without asking about
// records must not make the inner layer's check disappear.
func TestReentrySkipCompleted(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	first, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Complete(ctx, []byte("task-1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	outer, err := c.Acquire(ctx, key) // no SkipCompleted: the outer layer takes the lock
	if err != nil {
		t.Fatal(err)
	}
	lctx := dlock.WithLock(ctx, outer)
	_, err = c.Acquire(lctx, key, dlock.SkipCompleted())
	var ce *dlock.CompletedError
	if !errors.As(err, &ce) || string(ce.Record) != "task-1" || !errors.Is(err, dlock.ErrCompleted) {
		t.Fatalf("re-entry with SkipCompleted: %v, want the record task-1", err)
	}
	if outer.HoldCount() != 1 {
		t.Fatalf("hold count %d after the refused re-entry, want 1", outer.HoldCount())
	}
	inner, err := c.Acquire(lctx, key) // without SkipCompleted the re-entry still works
	if err != nil || inner.HoldCount() != 2 {
		t.Fatalf("plain re-entry: %v", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := c.TryAcquire(ctx, key); err != nil {
		t.Fatalf("the lock was not freed: %v", err)
	} else {
		_ = held.Release(ctx)
	}
}

// Error texts name no key: keys may hold user data (a user id, an Idempotency-Key), and
// callers log errors. CompletedError keeps the key in its field.
func TestErrorTextsHideKey(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := "user-alice@example.com:" + uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	errs := []error{lk.Refresh(ctx, 0), lk.Complete(ctx, []byte("x"), 0)}
	if err := lk.Complete(ctx, []byte("done"), time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, key, dlock.SkipCompleted())
	var done *dlock.CompletedError
	if !errors.As(err, &done) || done.Key != key {
		t.Fatalf("SkipCompleted after Complete: %v", err)
	}
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("no error")
		}
		if strings.Contains(err.Error(), "alice") {
			t.Errorf("error text %q holds the key", err)
		}
	}
}

// WithLock calls racing with the release of a re-entrant hold: every context made for that
// hold is done once Release has returned, whichever came first.
func TestWithLockRacingInnerRelease(t *testing.T) {
	c, ctx, key, outer, octx := holdOuter(t)
	for range 20 {
		inner, err := c.Acquire(octx, key)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		made := make(chan context.Context, 200)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					made <- dlock.WithLock(octx, inner)
				}
			}()
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(made)
		for wctx := range made {
			wantDone(t, wctx, dlock.ErrNotHeld, "a WithLock context of the released inner hold")
		}
	}
	if octx.Err() != nil || outer.HoldCount() != 1 {
		t.Fatalf("outer context %v, %d holds", octx.Err(), outer.HoldCount())
	}
}

// holdOuter acquires a key for the test, released at its end, and returns it with the
// context that carries it, for re-entrant holds.
func holdOuter(t *testing.T) (c *dlock.Client, ctx context.Context, key string, outer *dlock.Lock, octx context.Context) {
	t.Helper()
	_, _, c = setup(t)
	ctx = testContext(t, 20*time.Second)
	key = uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = outer.Release(context.Background()) })
	return c, ctx, key, outer, dlock.WithLock(ctx, outer)
}
