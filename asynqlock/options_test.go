package asynqlock_test

import (
	"context"
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
