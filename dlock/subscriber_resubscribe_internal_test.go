package dlock

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A waiter whose SUBSCRIBE fails because the pub/sub connection broke under it (go-redis
// dials a new one in that very call, or at the next) subscribes again once it has looked at
// the lock, and is woken by the hand-off message from then on. Before, it waited without a
// subscription for the rest of its wait, looking every retry interval: here an hour, so
// only the message gets it the lock within the test. The break comes on a connection that
// another wait keeps in use, and on the connection's first SUBSCRIBE, which dials it.
func TestWaiterSubscribesAgainAfterFailedSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pinned bool // another wait of the Client keeps its pub/sub connection in use
	}{
		{"connection in use", true},
		{"first subscribe", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			admin := srv.Client(t)
			holder := New(srv.Client(t))
			defer func() { _ = holder.Close() }()

			key := t.Name()
			_, ch := holder.be.(*redisBackend).keys(key)
			// What the waiter's Client writes, in order: its looks at the lock and its
			// SUBSCRIBEs of the key's channel.
			var mu sync.Mutex
			var wrote []string
			written := func() []string {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(wrote)
			}
			var armed atomic.Bool
			acquireSHA := []byte(scriptAcquire.sha)
			n := &testNet{
				stall: func(p []byte) time.Duration {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case bytes.Contains(p, acquireSHA):
						wrote = append(wrote, "look")
					case isSubscribeOf(p, ch):
						wrote = append(wrote, "subscribe")
					}
					return 0
				},
				cut: func(p []byte) bool { return isSubscribeOf(p, ch) && armed.CompareAndSwap(true, false) },
			}
			w := New(srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial }), WithRetryInterval(time.Hour))
			defer func() { _ = w.Close() }()
			// Load the scripts, so that every look is an EVALSHA.
			if lk, err := w.Acquire(ctx, key+"-warm"); err != nil {
				t.Fatal(err)
			} else if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.pinned {
				pin, err := holder.Acquire(ctx, key+"-pin")
				if err != nil {
					t.Fatal(err)
				}
				pctx, stop := context.WithCancel(ctx)
				pinDone := make(chan struct{})
				go func() { defer close(pinDone); _, _ = w.Acquire(pctx, key+"-pin") }()
				defer func() { stop(); <-pinDone; _ = pin.Release(ctx) }()
				_, pinCh := holder.be.(*redisBackend).keys(key + "-pin")
				if !waitFor(10*time.Second, func() bool { return admin.PubSubNumSub(ctx, pinCh).Val()[pinCh] == 1 }) {
					t.Fatal("the pin wait never subscribed")
				}
			}

			held, err := holder.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			type result struct {
				lk  *Lock
				err error
			}
			got := make(chan result, 1)
			go func() {
				wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
				defer wcancel()
				lk, err := w.Acquire(wctx, key)
				got <- result{lk, err}
			}()
			// Subscribed again, confirmed by Redis, and a look after it.
			if !waitFor(10*time.Second, func() bool {
				w := written()
				subs := len(slices.DeleteFunc(slices.Clone(w), func(s string) bool { return s != "subscribe" }))
				return subs >= 2 && w[len(w)-1] == "look" && !armed.Load() && admin.PubSubNumSub(ctx, ch).Val()[ch] == 1
			}) {
				t.Fatalf("the waiter did not subscribe again after its SUBSCRIBE failed (wrote %v, cut %v): "+
					"it waits by looking every retry interval", written(), !armed.Load())
			}
			looked := len(written())
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter subscribed again: %v, want the lock by the hand-off message", r.err)
			}
			if after := written()[looked:]; slices.Contains(after, "look") {
				t.Errorf("the waiter looked after the release (%v): it got the lock by a look, not by the message", after)
			}
			if err := r.lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A waiter whose SUBSCRIBE is still under way when the retry interval is up goes on without
// it, looking every retry interval (TestSlowSubscribeKeepsPlaceInLine). When that send then
// fails (here the dial of the pub/sub connection, held until its bound), the waiter
// subscribes again. Before, its listener was left neither ready nor gone: it waited by
// looking for the rest of its wait, and the channel was never subscribed again.
func TestWaiterSubscribesAgainAfterSlowSubscribeFails(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	admin := srv.Client(t)
	holder := New(srv.Client(t))
	defer func() { _ = holder.Close() }()

	var slow, failed atomic.Bool
	n := &testNet{delay: func() time.Duration {
		if slow.CompareAndSwap(true, false) {
			failed.Store(true) // the dial waits until its context ends, and fails
			return time.Hour
		}
		return 0
	}}
	rdbW := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	if err := rdbW.Ping(ctx).Err(); err != nil { // the command connection, before the slow dial
		t.Fatal(err)
	}
	w := New(rdbW, WithRetryInterval(200*time.Millisecond))
	defer func() { _ = w.Close() }()

	key := t.Name()
	_, ch := w.be.(*redisBackend).keys(key)
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	got := make(chan error, 1)
	go func() {
		lk, err := w.Acquire(ctx, key)
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	// The slow dial fails after its bound (sendTimeout); the waiter subscribes again.
	if !waitFor(sendTimeout+10*time.Second, func() bool {
		return failed.Load() && admin.PubSubNumSub(ctx, ch).Val()[ch] == 1
	}) {
		t.Fatalf("the waiter did not subscribe again after its slow SUBSCRIBE failed (dial held: %v): "+
			"it waits by looking every retry interval", failed.Load())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}
