package asynqlock_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A wait shorter than a Redis round trip bounds the wait for a busy lock, not the first look:
// a task on a free lock runs (under OncePerSlot's RevokeTask a false busy would drop it).
func TestTinyWaitTakesFreeLock(t *testing.T) {
	e := newEnv(t)
	runs := 0
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }),
		e.lock, taskAccountKey, asynqlock.WithWait(20*time.Microsecond))
	for range 5 {
		if err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"tiny"}`))); err != nil {
			t.Fatalf("free lock, WithWait(20µs): %v", err)
		}
	}
	if runs != 5 {
		t.Fatalf("handler ran %d times, want 5", runs)
	}
}

// OncePerSlot keeps its done marker max(10 x period, 1 min), also for a period so long that
// 10 x period does not fit a Duration ("once, ever"): the marker does not fall back to a minute.
func TestOncePerSlotHugePeriodKeepsMarker(t *testing.T) {
	e := newEnv(t)
	key := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType))
	for _, tc := range []struct {
		name   string
		period time.Duration
	}{{"max", math.MaxInt64}, {"100y", 100 * 365 * 24 * time.Hour}} {
		typ := "migrate-" + tc.name
		h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
			e.lock, key, asynqlock.OncePerSlot(tc.period))
		if err := h.ProcessTask(t.Context(), asynq.NewTask(typ, nil)); err != nil {
			t.Fatal(err)
		}
		keys := e.rdb.Keys(t.Context(), "*"+typ+"*:done").Val()
		if len(keys) != 1 {
			t.Fatalf("%s: done markers %v, want one", tc.name, keys)
		}
		if ttl := e.rdb.PTTL(t.Context(), keys[0]).Val(); ttl < 10*365*24*time.Hour {
			t.Errorf("OncePerSlot(%s): marker kept %v, want years", tc.name, ttl)
		}
	}
}

// A tiny WithWait on a busy lock answers busy at once, whatever the wait: the bound handed to
// dlock is read from the clock once, so it never reaches WithMaxWait as 0 (no bound), which
// would keep the task waiting to its own deadline (asynq's task timeout) and bypass WithBusy.
func TestTinyWaitOnBusyLockIsBusy(t *testing.T) {
	e := newEnv(t)
	task := asynq.NewTask("account:deduct", []byte(`{"account_id":"tiny-busy"}`))
	key, err := taskAccountKey.Key(asynqlock.NewSource(t.Context(), task))
	if err != nil {
		t.Fatal(err)
	}
	held, err := e.lock.Acquire(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	for wait := 50 * time.Nanosecond; wait <= 5*time.Microsecond; wait += 25 * time.Nanosecond {
		h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			t.Error("handler ran on a busy lock")
			return nil
		}), e.lock, taskAccountKey, asynqlock.WithWait(wait))
		for i := range 5 {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // the task's own timeout
			start := time.Now()
			err := h.ProcessTask(ctx, task)
			took := time.Since(start)
			cancel()
			var locked *asynqlock.ErrLocked
			// A wait to the task's deadline would end with the context's error, not *ErrLocked:
			// the error tells the two apart without a bound on the time taken.
			if !errors.As(err, &locked) {
				t.Fatalf("WithWait(%v) on a busy lock, try %d: err %v after %v; want *ErrLocked, not a wait to the task's deadline", wait, i, err, took)
			}
		}
	}
}
