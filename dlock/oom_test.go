package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestFullRedisFinishesWork: a Redis that is full under noeviction (the setting Check asks
// for) refuses new locks, but never the end of work already running: a plain release, the
// release of re-entered holds, a release with Complete's record, a hand-off to a waiter in
// line, a waiter leaving the line. A busy lock stays busy (ErrNotObtained), not a store
// error, also for a wait that cannot join the line. Before, the release scripts' first write
// was refused with OOM: the lock stayed held to its lease end and Complete's record was lost,
// so a retry ran the work again.
func TestFullRedisFinishesWork(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
	admin := srv.Client(t) // to see the line
	c := newClient(t, srv.Client(t), dlock.WithRetryInterval(100*time.Millisecond))
	other := newClient(t, srv.Client(t), dlock.WithRetryInterval(100*time.Millisecond))
	ctx := testContext(t, 30*time.Second)
	full := func(on bool) {
		t.Helper()
		if err := srv.SetFull(ctx, on); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(key string) *dlock.Lock {
		t.Helper()
		lk, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
	paid, outer, plain := acquire("pay"), acquire("nested"), acquire("plain")
	inner, err := c.Acquire(dlock.WithLock(ctx, outer), "nested")
	if err != nil {
		t.Fatal(err)
	}
	// Released outer hold first: that release writes the x field, a write Redis refuses when
	// full unless the script wrote before.
	outerFirst := acquire("outer-first")
	innerLast, err := c.Acquire(dlock.WithLock(ctx, outerFirst), "outer-first")
	if err != nil {
		t.Fatal(err)
	}
	// A waiter in line for "handed", and one for "left" that gives up while Redis is full.
	holder, left := acquire("handed"), acquire("left")
	handed := make(chan error, 1)
	go func() {
		lk, err := other.Acquire(ctx, "handed")
		if err == nil {
			err = lk.Release(ctx)
		}
		handed <- err
	}()
	leaverCtx, cancelLeaver := context.WithCancel(ctx)
	leaver := make(chan error, 1)
	go func() {
		_, err := other.Acquire(leaverCtx, "left")
		leaver <- err
	}()
	waitQueued(t, admin, ctx, "handed")
	waitQueued(t, admin, ctx, "left")
	full(true)

	// New locks stop: the store's refusal, with Redis's reason.
	if _, err := c.TryAcquire(ctx, "new"); !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("TryAcquire of a free key when full = %v, want ErrUnavailable (OOM)", err)
	}
	// A busy lock is busy: a wait that cannot join the line is not a store error. The wait
	// also outlasts the waiters' liveness window (3 retry intervals): the waiters in line keep
	// their place only if refreshing it is not refused.
	waitCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = other.Acquire(waitCtx, "pay")
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Acquire of a held key when full = %v, want ErrNotObtained alone", err)
	}
	// Work that was running finishes: the lock freed, its record stored if asked. A plain
	// release (last hold, nobody in line, no record) first tries its one write, which a full
	// Redis refuses, and then frees the lock as every other release does.
	if err := plain.Release(ctx); err != nil {
		t.Fatalf("Release when full: %v", err)
	}
	if err := paid.Complete(ctx, []byte("charged"), time.Minute); err != nil {
		t.Fatalf("Complete when full: %v", err)
	}
	var done *dlock.CompletedError
	if _, err := other.TryAcquire(ctx, "pay", dlock.SkipCompleted()); !errors.As(err, &done) || string(done.Record) != "charged" {
		t.Fatalf("SkipCompleted after the Complete = %v, want the record", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("releasing a re-entry hold when full: %v", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("releasing the outer hold when full: %v", err)
	}
	if err := outerFirst.Release(ctx); err != nil {
		t.Fatalf("releasing an outer hold before its re-entry when full: %v", err)
	}
	if err := innerLast.Release(ctx); err != nil {
		t.Fatalf("releasing the last, re-entry hold when full: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("release to a waiter when full: %v", err)
	}
	if err := <-handed; err != nil {
		t.Fatalf("the waiter in line when full: %v", err)
	}
	cancelLeaver()
	if err := <-leaver; !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	if err := left.Release(ctx); err != nil {
		t.Fatalf("release after the waiter left when full: %v", err)
	}

	// Room again: every key released above is free at once (nothing waits for a lease to
	// end, nothing was handed to the waiter that left).
	full(false)
	for _, key := range []string{"pay", "nested", "outer-first", "plain", "handed", "left", "new"} {
		lk, err := c.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("%s after Redis has room again: %v", key, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
