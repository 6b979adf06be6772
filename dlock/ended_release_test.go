package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// Release and Complete with a context that had ended before the call (defer lock.Release(ctx)
// after the request's context was cancelled) still free the key, and Complete stores its
// record. Before, nothing was sent: the hold counted as released (a retry answered
// ErrNotHeld), the record was lost, and the key stayed locked to the end of its lease.
func TestReleaseWithEndedContextFreesTheKey(t *testing.T) {
	_, rdb, c := setup(t)
	other := newClient(t, rdb)
	ctx := testContext(t, 10*time.Second)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, complete := range []bool{false, true} {
		key := uniqueKey(t)
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if complete {
			err = lk.Complete(ended, []byte("paid"), time.Hour)
		} else {
			err = lk.Release(ended)
		}
		if err != nil {
			t.Fatalf("complete=%v: with an ended context: %v, want nil", complete, err)
		}
		if lk.Err() == nil {
			t.Errorf("complete=%v: the hold is not released: Err() = nil", complete)
		}
		rec, ok, err := other.Completed(ctx, key)
		if err != nil || ok != complete || (complete && string(rec) != "paid") {
			t.Errorf("complete=%v: record %q, %v, %v", complete, rec, ok, err)
		}
		if complete {
			continue // the record answers acquisitions with SkipCompleted; the key is free
		}
		l2, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("the key is still locked after Release with an ended context: %v", err)
		}
		_ = l2.Release(ctx)
	}
}

// Refresh with an ended context sends nothing, so the outcome is known: the lease stays as it
// was. Before, the call could still be sent with the dead context (the renewal token and the
// context's end raced) and the lease was cut to the ttl asked for, as if Redis might have
// applied it: a healthy WithTTL(10s) lock then counted as lost 100 ms later.
func TestRefreshWithEndedContextKeepsTheLease(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	var locks []*dlock.Lock
	for range 20 {
		lk, err := c.Acquire(ctx, uniqueKey(t), dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
		if err := lk.Refresh(ended, 100*time.Millisecond); !errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Refresh with an ended context: %v, want ErrUnavailable and context.Canceled", err)
		}
	}
	time.Sleep(300 * time.Millisecond) // past the 100 ms a shortened lease would have kept
	for i, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Errorf("lock %d: %v after a Refresh that sent nothing (Redis PTTL %v)", i, err, rdb.PTTL(ctx, redisName(lk.Key(), "lock")).Val())
		}
		_ = lk.Release(ctx)
	}
}

// Every call panics for a nil context, naming itself, before it changes anything (WithLock for
// a nil Lock too): a Release or Complete that panicked leaves the hold as it was, so the lock
// is still renewed, still held, and freed by the next Release. Before, Release marked the hold released and took the lease
// off the watchdog, then panicked inside: the key stayed locked and a retry was refused.
func TestNilContextPanicsBeforeAnything(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithLease(time.Second))
	other := newClient(t, rdb)
	ctx := testContext(t, 10*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	for _, tc := range []struct {
		op   string
		call func()
	}{
		{"Acquire", func() { _, _ = c.Acquire(nilCtx, "k") }},
		{"TryAcquire", func() { _, _ = c.TryAcquire(nilCtx, "k") }},
		{"Do", func() { _ = c.Do(nilCtx, "k", func(context.Context) error { return nil }) }},
		{"Completed", func() { _, _, _ = c.Completed(nilCtx, "k") }},
		{"Check", func() { _ = c.Check(nilCtx) }},
		{"WithLock", func() { _ = dlock.WithLock(nilCtx, lk) }},
		{"FromContext", func() { _, _ = dlock.FromContext(nilCtx) }},
		{"Release", func() { _ = lk.Release(nilCtx) }},
		{"Complete", func() { _ = lk.Complete(nilCtx, []byte("r"), time.Minute) }},
		{"Refresh", func() { _ = lk.Refresh(nilCtx, time.Second) }},
	} {
		func() {
			defer func() {
				if p, _ := recover().(string); !strings.Contains(p, "dlock: "+tc.op+" with a nil Context") {
					t.Errorf("%s(nil ctx): panic %q, want one naming %s and the nil Context", tc.op, p, tc.op)
				}
			}()
			tc.call()
		}()
	}
	func() {
		defer func() {
			if p, _ := recover().(string); p != "dlock: WithLock with a nil Lock" {
				t.Errorf("WithLock(ctx, nil): panic %q, want one naming the nil Lock", p)
			}
		}()
		_ = dlock.WithLock(ctx, nil)
	}()
	time.Sleep(1500 * time.Millisecond) // past the 1 s lease: renewed all along
	if err := lk.Err(); err != nil || lk.HoldCount() != 1 {
		t.Fatalf("after the panics: Err %v, %d holds; want the lock held, renewed, with its one hold", err, lk.HoldCount())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release after the panics: %v", err)
	}
	l2, err := other.TryAcquire(ctx, lk.Key())
	if err != nil {
		t.Fatalf("the key is still locked: %v", err)
	}
	_ = l2.Release(ctx)
}

// An Acquire whose context carries the lock but cannot end (context.WithoutCancel of the
// lock's context, for work that outlives the hold), racing the lock's last release, takes the
// lock afresh when the release wins, as the same call a moment later does. Before, it failed
// with ErrNotObtained and context.Canceled although its context never ends.
func TestReentryRacingReleaseWithContextThatCannotEnd(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 60*time.Second)
	raced := 0
	for i := range 200 {
		key := uniqueKey(t)
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		kept := context.WithoutCancel(dlock.WithLock(ctx, lk))
		done := make(chan struct{})
		go func() { defer close(done); _ = lk.Release(ctx) }()
		in, err := c.Acquire(kept, key)
		<-done
		if err != nil {
			t.Fatalf("iteration %d: Acquire with a context that cannot end: %v", i, err)
		}
		if in.HoldCount() == 1 && in.Token() > lk.Token() {
			raced++ // a fresh lock, not a re-entry of the released one
		}
		_ = in.Release(ctx)
	}
	t.Logf("%d of 200 calls took the lock afresh", raced)
}
