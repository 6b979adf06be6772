package dlock

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A lock handed to a waiter that takes it up too late (here its confirmation reaches Redis
// after the 60 ms hand-off lease ran out, as after a pause), while the waiter's context is
// cancelled (the HTTP client went away), was not obtained: the wait ran out on a busy lock
// (ErrNotObtained and context.Canceled). It is neither a lost lock (ErrLockLost: Acquire
// never returned one) nor a store that did not answer: Redis answered at once.
func TestExpiredHandOffWithEndedContextIsNotObtained(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var armed atomic.Bool
	tn := &testNet{stall: func(p []byte) time.Duration {
		if bytes.Contains(p, []byte(scriptRenew.sha)) && armed.CompareAndSwap(true, false) {
			time.AfterFunc(50*time.Millisecond, wcancel) // while the confirmation is held back
			return 300 * time.Millisecond                // past the hand-off lease
		}
		return 0
	}}
	c := New(srv.Client(t, func(o *redis.Options) { o.Dialer = tn.dial }))
	defer func() { _ = c.Close() }()
	rdb := srv.Client(t)
	other := New(rdb)
	defer func() { _ = other.Close() }()
	if err := rdb.ScriptLoad(ctx, scriptRenew.src).Err(); err != nil { // the confirmation is one EVALSHA
		t.Fatal(err)
	}
	key := "expired-handoff:" + t.Name()
	held, err := other.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	got := goAcquire(func() (*Lock, error) { return c.Acquire(wctx, key, WithTTL(60*time.Millisecond)) })
	ch := "lockguard:{" + key + "}:ch"
	if !waitFor(10*time.Second, func() bool { return numSub(t, rdb, ch) > 0 }) {
		t.Fatal("the waiter did not subscribe")
	}
	time.Sleep(100 * time.Millisecond) // the hand-off lease is all spent on the waiter's clock
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err == nil {
		_ = res.lk.Release(ctx)
		t.Fatal("precondition: the waiter confirmed the hand-off in time")
	}
	if armed.Load() {
		t.Fatalf("precondition: no confirmation was sent: %v", res.err)
	}
	if !errors.Is(res.err, ErrNotObtained) || !errors.Is(res.err, context.Canceled) ||
		errors.Is(res.err, ErrLockLost) || errors.Is(res.err, ErrUnavailable) {
		t.Fatalf("hand-off expired before its confirmation, context cancelled meanwhile: err = %v (ErrNotObtained=%v, ErrLockLost=%v, ErrUnavailable=%v); want ErrNotObtained and context.Canceled",
			res.err, errors.Is(res.err, ErrNotObtained), errors.Is(res.err, ErrLockLost), errors.Is(res.err, ErrUnavailable))
	}
}
