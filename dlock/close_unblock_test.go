package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// An acquisition whose context never ends (context.Background()), on a Redis client whose
// calls nothing bounds (ReadTimeout -1, without ContextTimeoutEnabled), returns
// ErrClosed at Close while Redis stays silent (redis-server stopped with SIGSTOP), whatever
// it is waiting for: its first look, a waiter's later look, a re-entry. Before, Close
// returned but the acquisition waited for Redis to answer. Once Redis answers again, nothing
// of it stands in the way of another Client.
func TestCloseEndsAcquisitionsOnSilentRedisWithoutReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		// start sets up, while Redis answers, what is under way when Redis falls silent. It
		// returns what starts the acquisition once Redis is silent, which returns its result
		// channel, and what to do once Redis answers again, before the key is checked free
		// (or nil).
		start func(t *testing.T, r silentRig) (silent func() <-chan error, answered func())
	}{
		{"first look", startFirstLook},
		{"TryAcquire", startTryLook},
		{"waiter's look", startWaiterLook},
		{"re-entry", startReentry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, pid := newSilentRig(t, false, nil, dlock.WithLease(time.Second),
				dlock.WithRetryInterval(100*time.Millisecond))
			c := r.c
			// A connection in the pool, so that the acquisition's call is sent and unanswered,
			// not dialled.
			if _, _, err := c.Completed(r.ctx, r.key); err != nil {
				t.Fatal(err)
			}
			silent, answered := tc.start(t, r)

			resume := stopRedis(t, pid)
			defer resume()
			sent, _ := r.looks.counts()
			res := silent()
			// Its call is on its way, unanswered: sent after Redis stopped.
			r.looks.wait(t, r.ctx, "the acquisition's call to the silent Redis",
				func(s, _ int) bool { return s > sent })

			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case err := <-res:
				if !errors.Is(err, dlock.ErrClosed) {
					t.Errorf("acquisition at Close: %v, want ErrClosed", err)
				}
			case <-time.After(5 * closeBound): // generous: the machine may be busy
				t.Errorf("acquisition still waiting for Redis %v after Close began\n%s",
					5*closeBound, dlockStacks())
				resume()
				wantClosed(t, res, "acquisition at Close")
			}
			select {
			case <-closed:
			case <-time.After(5 * closeBound):
				t.Fatalf("Close still running %v after it began, Redis silent\n%s", 5*closeBound, dlockStacks())
			}
			resume()
			if answered != nil {
				answered()
			}
			wantFree(t, r, "after the acquisition at Close returned")
		})
	}
}

// startFirstLook starts an Acquire of a free key once Redis is silent: its first look waits.
func startFirstLook(t *testing.T, r silentRig) (func() <-chan error, func()) {
	return func() <-chan error {
		return acquireErr(func() error { _, err := r.c.Acquire(markLooks(context.Background()), r.key); return err })
	}, nil
}

// startTryLook starts a TryAcquire of a free key once Redis is silent.
func startTryLook(t *testing.T, r silentRig) (func() <-chan error, func()) {
	return func() <-chan error {
		return acquireErr(func() error { _, err := r.c.TryAcquire(markLooks(context.Background()), r.key); return err })
	}, nil
}

// startWaiterLook queues an Acquire of c behind a lock of other, which is released only once
// Redis answers again: the waiter looks every retry interval, and its first look once Redis
// is silent waits for an answer.
func startWaiterLook(t *testing.T, r silentRig) (func() <-chan error, func()) {
	held, err := r.other.Acquire(r.ctx, r.key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	res := acquireErr(func() error { _, err := r.c.Acquire(markLooks(context.Background()), r.key); return err })
	waitQueued(t, r.rdb, r.ctx, r.key)
	waitChannel(t, r.ctx, r.rdb, r.key, true) // subscribed, looking every retry interval
	return func() <-chan error { return res }, func() {
		if err := held.Release(r.ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// startReentry takes the lock with c, and re-enters it once Redis is silent, with a context
// that never ends but carries the lock.
func startReentry(t *testing.T, r silentRig) (func() <-chan error, func()) {
	lk, err := r.c.Acquire(r.ctx, r.key)
	if err != nil {
		t.Fatal(err)
	}
	return func() <-chan error {
		return acquireErr(func() error {
			_, err := r.c.Acquire(dlock.WithLock(markLooks(context.Background()), lk), r.key)
			return err
		})
	}, nil
}

// acquireErr runs acquire in a goroutine; its error comes on the channel.
func acquireErr(acquire func() error) <-chan error {
	res := make(chan error, 1)
	go func() { res <- acquire() }()
	return res
}
