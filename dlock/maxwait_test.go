package dlock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// heldKey returns a new key and its lock, held until the test ends (or released earlier).
func heldKey(t *testing.T, c *dlock.Client, ctx context.Context) (string, *dlock.Lock) {
	t.Helper()
	key := uniqueKey(t)
	held, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Release(context.Background()) })
	return key, held
}

// WithMaxWait ends the wait for a busy lock once d has passed, with the error of a wait ended
// by its context's deadline, and takes the waiter out of line.
func TestMaxWaitEndsBusyWait(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key, _ := heldKey(t, c, ctx)

	const d = 300 * time.Millisecond
	start := time.Now()
	lk, err := c.Acquire(ctx, key, dlock.WithMaxWait(d))
	took := time.Since(start)
	if err == nil {
		_ = lk.Release(ctx)
		t.Fatal("Acquire of a held lock with WithMaxWait returned a lock")
	}
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want one matching ErrNotObtained and context.DeadlineExceeded", err)
	}
	if took < d {
		t.Errorf("Acquire gave up after %v, before the max wait of %v", took, d)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ended: the max wait did not")
	}
	// The waiter is out of line by the time Acquire returns.
	if n := rdb.ZCard(ctx, redisName(key, "q")).Val(); n != 0 {
		t.Errorf("%d waiters in line after Acquire gave up, want 0", n)
	}
}

// A waiter that gives up (its max wait ran out, its context's deadline passed or its context
// was cancelled) is out of line when Acquire returns: the holder's release that follows frees
// the lock rather than hand it to the waiter that has gone, and a TryAcquire after it takes it.
func TestGivenUpWaiterIsOutOfLineOnReturn(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	cases := []struct {
		name string
		wait func(key string) error
	}{
		{"max wait", func(key string) error {
			_, err := c.Acquire(ctx, key, dlock.WithMaxWait(30*time.Millisecond))
			return err
		}},
		{"context deadline", func(key string) error {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancel()
			_, err := c.Acquire(wctx, key)
			return err
		}},
		{"context cancelled", func(key string) error {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			time.AfterFunc(30*time.Millisecond, cancel)
			_, err := c.Acquire(wctx, key)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 5 {
				key, held := heldKey(t, c, ctx)
				if err := tc.wait(key); !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("round %d: Acquire of a held lock: %v, want ErrNotObtained", i, err)
				}
				if n := rdb.ZCard(ctx, redisName(key, "q")).Val(); n != 0 {
					t.Fatalf("round %d: %d waiters in line after the only waiter's Acquire returned, want 0", i, n)
				}
				if err := held.Release(ctx); err != nil {
					t.Fatalf("round %d: Release: %v", i, err)
				}
				lk, err := c.TryAcquire(ctx, key)
				if err != nil {
					t.Fatalf("round %d: TryAcquire after the release, nobody waiting: %v", i, err)
				}
				if err := lk.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A lock released within the max wait goes to the waiter.
func TestMaxWaitTakesReleasedLock(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key, held := heldKey(t, c, ctx)
	time.AfterFunc(200*time.Millisecond, func() { _ = held.Release(context.Background()) })
	lk, err := c.Acquire(ctx, key, dlock.WithMaxWait(10*time.Second))
	if err != nil {
		t.Fatalf("Acquire with a max wait of 10 s, lock released after 200 ms: %v", err)
	}
	if lk.Token() <= held.Token() {
		t.Errorf("token %d after a hand-off from token %d", lk.Token(), held.Token())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A max wait far shorter than a round trip still takes a free lock: the first look is not cut
// short by it.
func TestTinyMaxWaitTakesFreeLock(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	for i := range 20 {
		lk, err := c.Acquire(ctx, uniqueKey(t), dlock.WithMaxWait(time.Nanosecond))
		if err != nil {
			t.Fatalf("acquisition %d of a free lock with WithMaxWait(1ns): %v", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// With a tiny max wait, a store that holds the look back is unavailable, not a busy lock.
func TestTinyMaxWaitSilentStoreIsUnavailable(t *testing.T) {
	srv, _, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.TryAcquire(ctx, key) // scripts and connections ready
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Release(ctx)

	admin := redis.NewClient(srv.Options())
	defer func() { _ = admin.Close() }()
	pause := dlock.FirstLook + time.Second
	if err := admin.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Do(context.Background(), "CLIENT", "UNPAUSE").Err() }()
	lk, err = c.Acquire(ctx, key, dlock.WithMaxWait(time.Millisecond))
	if err == nil {
		_ = lk.Release(ctx)
		t.Fatal("precondition: the acquire script ran during CLIENT PAUSE WRITE")
	}
	if errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("free lock, Redis holding writes: err = %v, want ErrUnavailable and not ErrNotObtained", err)
	}
}

// The caller's context still bounds the wait when it ends first; TryAcquire ignores the
// option; d <= 0 leaves the wait to the context.
func TestMaxWaitAndContext(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key, _ := heldKey(t, c, ctx)

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err := c.Acquire(wctx, key, dlock.WithMaxWait(time.Minute))
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || time.Since(start) > 10*time.Second {
		t.Errorf("context of 200 ms, max wait of a minute: err = %v after %v, want ErrNotObtained at the context's end", err, time.Since(start))
	}

	_, err = c.TryAcquire(ctx, key, dlock.WithMaxWait(time.Minute))
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire with WithMaxWait of a held lock: err = %v, want ErrNotObtained at once", err)
	}

	for _, d := range []time.Duration{0, -time.Second} {
		// start before the context: its deadline is then at least 300 ms after start, and a
		// wait that lasts until it takes at least that long.
		start = time.Now()
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = c.Acquire(wctx, key, dlock.WithMaxWait(d))
		took := time.Since(start)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) || took < 300*time.Millisecond {
			t.Errorf("WithMaxWait(%v): err = %v after %v, want the wait to last until the context's end (300 ms)", d, err, took)
		}
	}
}

// A nil option (a conditional one left unset) is skipped, in New and in an acquisition.
func TestNilOptionsAreSkipped(t *testing.T) {
	srv, _, _ := setup(t)
	var opt dlock.Option
	var acq dlock.AcquireOption
	c := newClient(t, srv.Client(t), opt, dlock.WithPrefix("nilopt"), nil)
	ctx := testContext(t, 10*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t), acq, nil, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("Acquire with nil options: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err = c.TryAcquire(ctx, uniqueKey(t), nil)
	if err != nil {
		t.Fatalf("TryAcquire with a nil option: %v", err)
	}
	_ = lk.Release(ctx)
}

// With WithReplicaAck, the first look includes the WAIT for the replicas: a free lock whose
// acquisition no replica acknowledges is ErrUnavailable under a short max wait too, not a busy
// lock, and it is released again.
func TestMaxWaitReplicaAckUnacknowledgedIsUnavailable(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithReplicaAck(1, time.Second)) // no replica: WAIT times out
	ctx := testContext(t, 30*time.Second)
	// The first time, the node has not loaded the script yet (NOSCRIPT, then the script sent
	// whole, each with its WAIT); the second time it has.
	for i := range 2 {
		key := uniqueKey(t)
		_, err := c.Acquire(ctx, key, dlock.WithMaxWait(100*time.Millisecond))
		if errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("acquisition %d: free lock, no replica to acknowledge, WithMaxWait(100ms): err = %v, want ErrUnavailable and not ErrNotObtained", i, err)
		}
		owner := "?"
		for deadline := time.Now().Add(5 * time.Second); owner != "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			owner = rdb.HGet(ctx, redisName(key, "lock"), "o").Val()
		}
		if owner != "" {
			t.Errorf("acquisition %d: lock still held by %q after it was not acknowledged", i, owner)
		}
	}
}

// lateLooks answers the acquire script calls from the n-th on late by delay, as a slow
// network or a busy Redis would: a look is on its way when the caller's deadline passes.
type lateLooks struct {
	sha   string
	n     int32
	calls atomic.Int32
	delay time.Duration
}

func (h *lateLooks) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateLooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lateLooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) > 1 && strings.EqualFold(a[0].(string), "evalsha") && a[1] == h.sha && h.calls.Add(1) >= h.n {
			time.Sleep(h.delay)
			return next(context.WithoutCancel(ctx), cmd)
		}
		return next(ctx, cmd)
	}
}

// A queued waiter whose deadline passes while its next look is on its way (answered 60 ms
// late, within the 100 ms Acquire waits for its clean-up) is out of line when Acquire
// returns, like a waiter whose deadline passed between looks.
func TestWaiterWithLookInFlightIsOutOfLineOnReturn(t *testing.T) {
	srv, rdb, holder := setup(t)
	ctx := testContext(t, 30*time.Second)
	var src []byte
	for _, f := range []string{"scripts/lib.lua", "scripts/acquire.lua"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	sha := redis.NewScript(string(src)).Hash()
	for i := range 3 {
		key, held := heldKey(t, holder, ctx)
		wrdb := srv.Client(t)
		// The first look queues the waiter; the look after its subscription is the late one.
		wrdb.AddHook(&lateLooks{sha: sha, n: 2, delay: 60 * time.Millisecond})
		waiter := newClient(t, wrdb)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := waiter.Acquire(wctx, key)
		cancel()
		if !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("round %d: Acquire of a held lock: %v, want ErrNotObtained", i, err)
		}
		if n := rdb.ZCard(ctx, redisName(key, "q")).Val(); n != 0 {
			t.Fatalf("round %d: %d waiters in line after the only waiter's Acquire returned, want 0", i, n)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lk, err := holder.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("round %d: TryAcquire after the release, nobody waiting: %v", i, err)
		}
		_ = lk.Release(ctx)
	}
}
