package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) {
	if helperProcess() {
		return
	}
	goleak.VerifyTestMain(m)
}

var keySeq atomic.Int64

// uniqueKey gives each test its own lock keys.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%d", t.Name(), keySeq.Add(1))
}

// newClient returns a dlock Client on rdb, closed when the test ends.
func newClient(t testing.TB, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// acquireAsync runs c.Acquire(ctx, key, opts...) in a goroutine. The channel gets the lock,
// or nil after the error was reported to t.
func acquireAsync(t testing.TB, c *dlock.Client, ctx context.Context, key string, opts ...dlock.AcquireOption) <-chan *dlock.Lock {
	got := make(chan *dlock.Lock, 1)
	go func() {
		lk, err := c.Acquire(ctx, key, opts...)
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	return got
}

// queueBehind takes key with holder and queues an Acquire of waiter behind it. It returns the
// held lock and the channel of the waiter's lock (see acquireAsync).
func queueBehind(t *testing.T, ctx context.Context, rdb *redis.Client, holder, waiter *dlock.Client, key string) (*dlock.Lock, <-chan *dlock.Lock) {
	t.Helper()
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, waiter, ctx, key)
	waitQueued(t, rdb, ctx, key)
	return lk, got
}

// received returns the lock from got, ending the test when the acquisition failed.
func received(t testing.TB, got <-chan *dlock.Lock) *dlock.Lock {
	t.Helper()
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	return lk
}

// setup starts a Redis server and returns a plain go-redis client on it and a dlock Client.
func setup(t testing.TB, opts ...dlock.Option) (*redistest.Server, *redis.Client, *dlock.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return srv, rdb, newClient(t, rdb, opts...)
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantDone fails the test unless ctx is done already, with a cause matching want.
func wantDone(t testing.TB, ctx context.Context, want error, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	default:
		t.Fatalf("%s: not done", what)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, want) {
		t.Fatalf("%s: cause %v, want %v", what, cause, want)
	}
}
