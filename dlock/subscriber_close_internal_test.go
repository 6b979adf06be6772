package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// Client.Close while a waiter's pub/sub connection is being dialled (a slow or unreachable
// node): the subscribe in flight runs on a context of its own (sendTimeout, 5 s) that Close
// does not cancel, and PubSub.Close waits for the PubSub mutex the dial holds. Close blocks
// until the dial gives up, and the waiter's Acquire ends with ErrUnavailable (the dial's
// deadline), not ErrClosed.
func TestCloseDuringSubscribeDial(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()

	holder := New(srv.Client(t))
	defer func() { _ = holder.Close() }()
	lk, err := holder.Acquire(ctx, "close-during-dial")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()

	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	if err := rdb.Ping(ctx).Err(); err != nil { // the command connection is made: only pub/sub dials from now
		t.Fatal(err)
	}
	c := New(rdb)
	n.block()
	defer n.release()

	errc := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "close-during-dial")
		errc <- err
	}()
	if !waitFor(5*time.Second, func() bool { return n.waiting() == 1 }) {
		t.Fatal("the waiter's pub/sub dial never started")
	}

	start := time.Now()
	_ = c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v: it waited for the pub/sub dial in flight", d.Round(100*time.Millisecond))
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Acquire ended by Close returned %v, want an error matching ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}
