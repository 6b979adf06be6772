package dlock_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// The waiter is woken by the release message, not by its fallback retry: that is set to an
// hour here, so a waiter the message missed would still be waiting when the test's context
// ends, and fail.
func TestWaiterWokenByRelease(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithRetryInterval(time.Hour))
	waiter := newClient(t, rdb, dlock.WithRetryInterval(time.Hour))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	var worst time.Duration
	for range 5 {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			l2, err := waiter.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			at := time.Now()
			_ = l2.Release(ctx)
			got <- at
		}()
		waitQueued(t, rdb, ctx, key)        // in line when the lock is released
		waitChannel(t, ctx, rdb, key, true) // and subscribed: the release's message reaches it
		released := time.Now()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		at, ok := <-got
		if !ok {
			t.FailNow()
		}
		worst = max(worst, at.Sub(released))
	}
	t.Logf("worst release-to-waiter latency: %v (fallback retry 1h)", worst)
}

// A waiter that comes back to a key it waited for a moment ago finds the channel still
// subscribed: it registers before its first look and is woken by the message, one script call
// in all. A first wait on a key costs two: a look, and a look again once subscribed.
func TestSecondWaitReusesSubscription(t *testing.T) {
	srv, rdb, c := setup(t, dlock.WithRetryInterval(5*time.Second))
	rt := &roundTrips{}
	wrdb := srv.Client(t)
	wrdb.AddHook(rt)
	waiter := newClient(t, wrdb, dlock.WithRetryInterval(5*time.Second))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	// Scripts loaded, connections dialled, the pub/sub connection open (a wait on another key).
	warm := key + "-warm"
	hold, err := c.Acquire(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(50 * time.Millisecond); _ = hold.Release(ctx) }()
	if lk, err := waiter.Acquire(ctx, warm); err != nil {
		t.Fatal(err)
	} else if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{2, 1} {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		rt.n.Store(0)
		got := make(chan error, 1)
		var n int64
		go func() {
			l2, err := waiter.Acquire(ctx, key)
			n = rt.n.Load()
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		waitQueued(t, rdb, ctx, key)
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("wait %d took %d round trips, want %d", i+1, n, want)
		}
	}
}

// waitQueued returns once key has a waiter in line.
func waitQueued(t *testing.T, rdb redis.Cmdable, ctx context.Context, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rdb.ZCard(ctx, redisName(key, "q")).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never joined the line")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A wait ends when its context does, not at its next look (an hour apart here).
func TestWaitCancelled(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithRetryInterval(time.Hour))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 200*time.Millisecond) }, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			wctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(200*time.Millisecond, cancel)
			return wctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Acquire(wctx, key)
			took := time.Since(start)
			if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want ErrNotObtained and %v", err, tc.want)
			}
			if took > 5*time.Second { // a hang guard: the next look is an hour away
				t.Fatalf("wait ended %v after start, context ended at 200ms", took)
			}
		})
	}
	// The waiters left the line and their subscriptions.
	deadline := time.Now().Add(3 * time.Second)
	for {
		queued, _ := rdb.Keys(ctx, "*{"+key+"}:q").Result()
		chans, _ := rdb.PubSubChannels(ctx, "*").Result()
		n := int64(0)
		for _, q := range queued {
			n += rdb.ZCard(ctx, q).Val()
		}
		if n == 0 && len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after cancelled waits: %d queued, channels %v", n, chans)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l2, err := c.TryAcquire(ctx, key); err != nil {
		t.Fatalf("a ghost waiter holds the lock: %v", err)
	} else {
		_ = l2.Release(ctx)
	}
}

// Under contention the lock goes round the waiters: no goroutine is starved.
func TestFairUnderContention(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	const workers = 8
	const run = 2 * time.Second
	var (
		mu    sync.Mutex
		waits []time.Duration
		count [workers]int
		wg    sync.WaitGroup
	)
	stop := time.Now().Add(run)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				lk, err := c.Acquire(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				waited := time.Since(start)
				spin(100 * time.Microsecond)
				if err := lk.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, waited)
				count[w]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	total := len(waits)
	fair := float64(total) / workers
	t.Logf("%d acquisitions in %v, per goroutine %v, wait p50 %v p99 %v max %v",
		total, run, count, waits[total/2], waits[total*99/100], waits[total-1])
	for w, n := range count {
		if float64(n) < fair/2 || float64(n) > fair*2 {
			t.Errorf("goroutine %d got %d acquisitions, fair share %.0f", w, n, fair)
		}
	}
	if waits[total-1] > 2*time.Second {
		t.Errorf("max wait %v: a waiter was starved", waits[total-1])
	}
}

// spin busy-waits d, standing in for a short critical section.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	// go-redis retries a refused dial 5 times with 100 ms backoff and then each command up to
	// MaxRetries times: on a loaded machine that alone can outlast a short context, and the
	// honest answer is then "not obtained, deadline exceeded". Fail fast to see ErrUnavailable.
	rdb := srv.Client(t, func(o *redis.Options) { o.DialerRetries = 1; o.MaxRetries = -1 })
	c := newClient(t, rdb)
	ctx := testContext(t, 30*time.Second)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []bool{false, true} {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		var err error
		if wait {
			_, err = c.Acquire(actx, uniqueKey(t))
		} else {
			_, err = c.TryAcquire(actx, uniqueKey(t))
		}
		cancel()
		if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("wait=%v: err = %v, want ErrUnavailable", wait, err)
		}
		if !strings.Contains(err.Error(), "refused") {
			t.Errorf("wait=%v: the Redis error is not wrapped: %v", wait, err)
		}
		if time.Since(start) > 5500*time.Millisecond {
			t.Fatalf("wait=%v took %v, past its context", wait, time.Since(start))
		}
	}
	// With default client settings the call still ends with its context at the latest.
	slow := newClient(t, srv.Client(t))
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := slow.Acquire(actx, uniqueKey(t))
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	if !errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrUnavailable or the context's error", err)
	}
}

// A server that accepts but never answers (paused) must not hold a wait past its context,
// even though the Redis client has no ContextTimeoutEnabled.
func TestHungRedisRespectsContext(t *testing.T) {
	srv, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	if err := srv.Pause(ctx, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(actx, uniqueKey(t))
	// The store did not answer: unavailable, with the deadline (see TestWaitOnSilentStoreIsUnavailable).
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if took := time.Since(start); took > 4*time.Second { // Redis answers again at 6 s
		t.Fatalf("Acquire returned after %v with a 300ms context", took)
	}
}

// A release whose context cannot end (context.WithoutCancel of a finished request) is still
// bounded when the Redis client has no read timeout: it gives up after 5 s, not when Redis
// answers again.
func TestReleaseBoundedWithoutReadTimeout(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Client(t, func(o *redis.Options) { o.ReadTimeout, o.MaxRetries = -1, -1 }))
	ctx := testContext(t, 20*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	const pause = 7 * time.Second
	if err := srv.Pause(ctx, pause); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = lk.Release(context.WithoutCancel(ctx))
	if took := time.Since(start); took >= pause-500*time.Millisecond {
		t.Fatalf("Release returned after %v, when Redis answered again (%v pause): unbounded", took, pause)
	}
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Release on a hung Redis: %v, want ErrUnavailable", err)
	}
}

// A waiter that never gets the hand-off message (here: its user may not subscribe) learns of
// the hand-off from its own fallback look. The lock then holds only the short claim lease, and
// the waiter must renew it in time (a third into the claim lease), or it expires under the new
// holder.
func TestHandOffLearnedByLooking(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--user", "deaf", "on", ">deaf", "~*", "+@all", "resetchannels"))
	// The releasing client sets the claim lease: 3 x its retry interval = 300 ms.
	holder := newClient(t, srv.Client(t), dlock.WithRetryInterval(100*time.Millisecond))
	deaf := newClient(t, srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "deaf", "deaf" }),
		// A lease whose first regular renewal (at about 700 ms) comes after the claim ends.
		dlock.WithRetryInterval(100*time.Millisecond), dlock.WithLease(3*time.Second))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, deaf, ctx, key)
	waitQueued(t, srv.Client(t), ctx, key) // the release hands it the lock
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got

	if l2 == nil {
		t.FailNow()
	}
	// Hold for longer than the claim lease (3 x 100 ms) and the lease itself.
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if err := l2.Err(); err != nil {
			t.Fatalf("hand-off learned by looking was lost after %v: %v", time.Since(start), err)
		}
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// The claim lease of a hand-off is the releasing client's (3 x its retry interval), which may
// be far shorter than the waiter's own. The waiter learns it from the hand-off message and
// renews in time: no rival gets the key, and the lock is soon renewed to the waiter's lease.
func TestHandOffLeaseFromReleaser(t *testing.T) {
	// The waiter has the default retry interval: its own claim would be 3 s. The releaser's
	// claim is 30 ms.
	_, rdb, waiter := setup(t)
	releaser := newClient(t, rdb, dlock.WithRetryInterval(10*time.Millisecond))
	rival := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)

	lk, err := releaser.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, waiter, ctx, key)
	waitQueued(t, rdb, ctx, key) // the release hands it the lock, with the releaser's claim
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	// Ten claim leases: a waiter that took its own 3 s for the claim would renew after 1 s,
	// long after Redis let the key go.
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; time.Sleep(10 * time.Millisecond) {
		r, err := rival.TryAcquire(ctx, key)
		if err == nil {
			_ = r.Release(ctx)
			t.Fatalf("a rival got the key %v after the hand-off", time.Since(start))
		}
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("rival: %v", err)
		}
		if err := l2.Err(); err != nil {
			t.Fatalf("the handed-off lock was lost: %v", err)
		}
	}
	if ttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); ttl < 10*time.Second {
		t.Fatalf("lock has %v left: not renewed to the waiter's lease", ttl)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A wait whose context ends while Redis does not answer (paused here, as in a partition) is
// a store failure, not a busy lock: the error matches ErrUnavailable and the deadline, and
// not ErrNotObtained. A wait that runs out on a busy lock stays ErrNotObtained.
func TestWaitOnSilentStoreIsUnavailable(t *testing.T) {
	srv, rdb, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	holder := newClient(t, rdb)
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()

	busy, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Acquire(busy, key)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a busy lock: %v, want ErrNotObtained and the deadline", err)
	}

	if err := srv.Pause(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	silent, cancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Acquire(silent, key)
	cancel()
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait while Redis does not answer: %v, want ErrUnavailable and the deadline, not ErrNotObtained", err)
	}
}
