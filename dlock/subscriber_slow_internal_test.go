package dlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A waiter whose subscription cannot be made at once (its pub/sub connection dials slowly,
// or its SUBSCRIBE is queued behind a slow one) still looks at the lock every retry interval,
// which keeps its place in line alive. Before, it was blocked in listen for up to the send's
// bound (5 s) and made no looks: after 3 retry intervals the release took it for dead and a
// waiter that came later got the lock first.
func TestSlowSubscribeKeepsPlaceInLine(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	admin := srv.Client(t)

	gate := &testNet{}
	rdbW := srv.Client(t, func(o *redis.Options) { o.Dialer = gate.dial })
	if err := rdbW.Ping(ctx).Err(); err != nil { // a command connection before the gate shuts
		t.Fatal(err)
	}
	w := New(rdbW, WithRetryInterval(200*time.Millisecond)) // liveness 600 ms
	defer func() { _ = w.Close() }()
	holder := New(srv.Client(t))
	defer func() { _ = holder.Close() }()
	other := New(srv.Client(t))
	defer func() { _ = other.Close() }()

	key := t.Name()
	keys, _ := w.be.(*redisBackend).keys(key)
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}

	gate.block()
	defer gate.release()
	type result struct {
		lk  *Lock
		err error
		at  time.Time
	}
	first, second := make(chan result, 1), make(chan result, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		l, err := w.Acquire(wctx, key)
		first <- result{l, err, time.Now()}
	}()
	// The first waiter is in line, and dialling its subscription.
	if !waitFor(10*time.Second, func() bool {
		n, _ := admin.ZCard(ctx, keys[1]).Result()
		return n == 1 && gate.waiting() > 0
	}) {
		t.Fatal("the first waiter did not queue and dial")
	}
	go func() {
		l, err := other.Acquire(wctx, key)
		second <- result{l, err, time.Now()}
	}()
	if !waitFor(10*time.Second, func() bool {
		n, _ := admin.ZCard(ctx, keys[1]).Result()
		return n == 2
	}) {
		t.Fatal("the second waiter did not queue")
	}
	// Four liveness periods with the dial held (well within the send's bound, 5 s): the
	// first waiter's process is alive, only its pub/sub connection is slow.
	time.Sleep(4 * 600 * time.Millisecond)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o, _ := admin.HGet(ctx, keys[0], "o").Result()
	gate.release()
	if !strings.HasPrefix(o, w.ids.prefix) {
		t.Errorf("the lock went to %s, not to the first waiter in line (client prefix %s), which is alive and waiting for its pub/sub dial",
			o, w.ids.prefix)
	}
	// Clean up: whoever holds it releases, the other gets it, then releases.
	for range 2 {
		select {
		case r := <-first:
			if r.err != nil {
				t.Fatal(r.err)
			}
			_ = r.lk.Release(ctx)
			first = nil
		case r := <-second:
			if r.err != nil {
				t.Fatal(r.err)
			}
			_ = r.lk.Release(ctx)
			second = nil
		case <-ctx.Done():
			t.Fatal(errors.New("waiters never finished"))
		}
	}
}
