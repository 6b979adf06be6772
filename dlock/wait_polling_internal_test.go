package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A waiter whose pub/sub connection cannot be made while its commands go through (here new
// connections are refused, as by a server at its client limit) still gets the lock when it
// is freed: it looks every retry interval instead of failing the Acquire.
func TestWaitWithoutSubscriptionPolls(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := New(srv.Client(t))
	defer func() { _ = holder.Close() }()
	held, err := holder.Acquire(ctx, "poll")
	if err != nil {
		t.Fatal(err)
	}

	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	if err := rdb.Ping(ctx).Err(); err != nil { // the command connection exists
		t.Fatal(err)
	}
	n.refuseDials()
	c := New(rdb, WithRetryInterval(100*time.Millisecond))
	defer func() { _ = c.Close() }()
	got := make(chan error, 1)
	go func() {
		lk, err := c.Acquire(ctx, "poll")
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	// The waiter is in line (its listen has failed by then or fails soon after).
	admin := srv.Client(t)
	for {
		if n, err := admin.ZCard(ctx, "lockguard:{poll}:q").Result(); err != nil || n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire without a subscription: %v, want the lock once it was freed", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the freed lock")
	}
}
