package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// An acquisition whose context has ended before it begins is not obtained (ErrNotObtained and
// the context's error, as for a wait that ran out) and sends nothing to Redis: no look, and
// no clean-up of a look that was never sent. The key stays free.
func TestAcquireWithEndedContextSendsNothing(t *testing.T) {
	h := &roundTrips{}
	plain, c := hooked(t, h)
	key := uniqueKey(t)
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	gone, leave := context.WithCancel(context.Background())
	leave()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"deadline", expired, context.DeadlineExceeded}, {"canceled", gone, context.Canceled}} {
		for _, try := range []bool{false, true} {
			acquire := c.Acquire
			if try {
				acquire = c.TryAcquire
			}
			lk, err := acquire(tc.ctx, key, dlock.WithMaxWait(time.Second))
			if lk != nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, tc.want) || errors.Is(err, dlock.ErrUnavailable) {
				t.Errorf("%s (try %v): %v, %v; want ErrNotObtained and %v", tc.name, try, lk, err, tc.want)
			}
		}
	}
	if n := h.reqs.Load(); n != 0 {
		t.Errorf("%d commands sent, want none", n)
	}
	if n, err := plain.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("%d keys in Redis (%v), want none", n, err)
	}
	lk, err := c.TryAcquire(testContext(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("the key is not free: %v", err)
	}
	_ = lk.Release(context.Background())
}
