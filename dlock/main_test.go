package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// acquired is the outcome of an Acquire run by acquireOutcome.
type acquired struct {
	lk  *dlock.Lock
	err error
}

// acquireOutcome runs c.Acquire(ctx, key) in a goroutine; the channel gets its lock and error,
// for tests that look at the error themselves (acquireAsync reports it to t).
func acquireOutcome(c *dlock.Client, ctx context.Context, key string) <-chan acquired {
	got := make(chan acquired, 1)
	go func() {
		lk, err := c.Acquire(ctx, key)
		got <- acquired{lk, err}
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

// channelOf is the pub/sub channel of key's hand-off messages (default prefix).
func channelOf(key string) string { return redisName(key, "ch") }

// redisName is the Redis key (or channel) of lock key with the given suffix ("lock", "q",
// "qd", "ch", "done"), under the default prefix.
func redisName(key, suffix string) string { return "lockguard:{" + key + "}:" + suffix }

// waitChannel waits until key's channel has a subscriber in Redis (subscribed), or none
// (!subscribed). It fails the test when ctx ends first.
func waitChannel(t testing.TB, ctx context.Context, rdb *redis.Client, key string, subscribed bool) {
	t.Helper()
	ch := channelOf(key)
	for {
		m, err := rdb.PubSubNumSub(ctx, ch).Result()
		if err == nil && (m[ch] > 0) == subscribed {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("channel %s: %d subscribers (%v), want subscribed %v", ch, m[ch], err, subscribed)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// lookMark marks the context of an acquisition whose calls a lookCounter counts.
type lookMark struct{}

// markLooks returns ctx marked for lookCounter.
func markLooks(ctx context.Context) context.Context { return context.WithValue(ctx, lookMark{}, true) }

// lookCounter is a go-redis hook (redis.Client.AddHook) that counts the commands sent with a
// context marked by markLooks (an acquisition's looks at the lock, a re-entry): sent (on
// their way to Redis, or about to be) and answered. A script call answered NOSCRIPT, which
// the Client sends again in full, counts once.
type lookCounter struct {
	mu             sync.Mutex
	sent, answered int
	changed        chan struct{} // closed, and replaced, at every change
}

func newLookCounter() *lookCounter { return &lookCounter{changed: make(chan struct{})} }

func (h *lookCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lookCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(lookMark{}) == nil {
			return next(ctx, cmd)
		}
		h.add(1, 0)
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.add(-1, 0)
		} else {
			h.add(0, 1)
		}
		return err
	}
}

func (h *lookCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lookCounter) add(sent, answered int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent += sent
	h.answered += answered
	close(h.changed)
	h.changed = make(chan struct{})
}

// counts returns the marked commands sent and answered so far.
func (h *lookCounter) counts() (sent, answered int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent, h.answered
}

// wait waits until cond holds for the counts of marked commands sent and answered. It fails
// the test, saying what was awaited, when ctx ends first.
func (h *lookCounter) wait(t testing.TB, ctx context.Context, what string, cond func(sent, answered int) bool) {
	t.Helper()
	for {
		h.mu.Lock()
		sent, answered, changed := h.sent, h.answered, h.changed
		h.mu.Unlock()
		if cond(sent, answered) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%s: not reached (%d marked commands sent, %d answered)", what, sent, answered)
		}
	}
}
