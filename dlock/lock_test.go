package dlock_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

func TestAcquireRelease(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if lk.Key() != key || lk.HoldCount() != 1 || lk.Token() <= 0 || lk.Err() != nil {
		t.Fatalf("lock: key %q holds %d token %d err %v", lk.Key(), lk.HoldCount(), lk.Token(), lk.Err())
	}
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotObtained", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done not closed after the last release")
	}
	if err := lk.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(lk.Err(), dlock.ErrNotHeld) || errors.Is(lk.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err after release: %v", lk.Err())
	}
	lk2, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if lk2.Token() <= lk.Token() {
		t.Fatalf("token did not grow: %d then %d", lk.Token(), lk2.Token())
	}
	if err := lk2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing but the free lock hash, kept a while for its last token, may remain, and every
	// key has a TTL.
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl < 0 || ttl > time.Minute {
			t.Errorf("key %s left with TTL %v", k, ttl)
		}
		if !strings.HasSuffix(k, ":lock") {
			t.Errorf("key %s left after release", k)
		} else if owner, n := locktest.Holds(t, rdb, k); owner != "" || n != 0 {
			t.Errorf("lock %s held by %q with %d holds after release", k, owner, n)
		}
	}
}

func TestMutualExclusion(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 60*time.Second)
	key, counter := uniqueKey(t), uniqueKey(t)+":counter"
	const workers, rounds = 50, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := c.Do(ctx, key, func(ctx context.Context) error {
					n, err := rdb.Get(ctx, counter).Int()
					if err != nil && !errors.Is(err, redisNil) {
						return err
					}
					return rdb.Set(ctx, counter, n+1, 0).Err()
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, _ := rdb.Get(ctx, counter).Int(); n != workers*rounds {
		t.Fatalf("counter = %d, want %d", n, workers*rounds)
	}
}

func TestBadInput(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 5*time.Second)
	for _, key := range []string{"", strings.Repeat("k", dlock.MaxKeyLen+1)} {
		if _, err := c.Acquire(ctx, key); !errors.Is(err, dlock.ErrInvalidKey) {
			t.Errorf("Acquire(%d bytes): %v, want ErrInvalidKey", len(key), err)
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrInvalidKey) {
			t.Errorf("TryAcquire(%d bytes): %v, want ErrInvalidKey", len(key), err)
		}
	}
	// Braces in a key neither break it nor collide with the escaped form.
	a, err := c.TryAcquire(ctx, "x{a}y")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.TryAcquire(ctx, "x%7Ba%7Dy")
	if err != nil {
		t.Fatalf("distinct key collided with a braced one: %v", err)
	}
	lk, err := c.TryAcquire(ctx, strings.Repeat("k", dlock.MaxKeyLen))
	if err != nil {
		t.Fatalf("key of MaxKeyLen: %v", err)
	}
	for _, l := range []*dlock.Lock{a, b, lk} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Complete(ctx, nil, 0); err == nil {
		t.Error("Complete with zero retention: no error")
	}
}

// Taking and releasing a lock with a request's kind of context (it can be cancelled, it has no
// deadline), on a go-redis client with default options, starts no goroutine: neither for the
// Redis calls nor for the context WithLock makes.
func TestNoGoroutinePerLock(t *testing.T) {
	_, _, c := setup(t)
	ctx, cancel := context.WithCancel(testContext(t, 10*time.Second))
	defer cancel()
	key := uniqueKey(t)
	lockOnce := func() {
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		work := dlock.WithLock(ctx, lk)
		if err := lk.Release(work); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 100
	if n := locktest.GoroutinesStarted(rounds, lockOnce); n > rounds/10 {
		t.Fatalf("%d goroutines started for %d Acquire+WithLock+Release, want none", n, rounds)
	}
}

// Refresh with a ttl shorter than the time to the watchdog's next renewal moves that renewal
// up, so a watchdog-renewed lock is not lost to its own Refresh.
func TestRefreshShortTTLMovesRenewal(t *testing.T) {
	const lease, short = 30 * time.Second, 3 * time.Second // renewed every 10 s; a 3 s Refresh
	_, rdb, c := setup(t, dlock.WithLease(lease))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	if err := lk.Refresh(ctx, short); err != nil {
		t.Fatal(err)
	}
	// The watchdog renews the lock to the Client lease within the refreshed 3 s (a third into
	// it), not at its old time, 10 s in: Redis sees more than the 3 s left (a renewal after
	// the Refresh) while the lock is still held. Renewed only at 10 s, it would have ended.
	for pttl := time.Duration(0); pttl <= short; pttl = rdb.PTTL(ctx, redisName(key, "lock")).Val() {
		select {
		case <-lk.Done():
			t.Fatalf("lock lost after Refresh(%v): %v (the watchdog's renewal was not moved up)", short, lk.Err())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if lk2, err := newClient(t, rdb).TryAcquire(ctx, key); err == nil {
		_ = lk2.Release(ctx)
		t.Fatalf("another client took the lock after Refresh(%v) and a renewal; holder Err: %v", short, lk.Err())
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("lock lost after Refresh(%v): %v", short, err)
	}
}

// A lock held for long (a leader, a singleton job) whose holder derives a context per unit of
// work with WithLock from one long-lived context: the same context comes back, so the lease
// keeps nothing per call. A context derived from another parent is a new one, and every one
// of them ends when the lock is released.
func TestWithLockFromSameContextDoesNotAccumulate(t *testing.T) {
	_, _, c := setup(t)
	service, stop := context.WithCancel(context.Background())
	defer stop()
	lk, err := c.Acquire(service, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	first := dlock.WithLock(service, lk)
	if again := dlock.WithLock(service, lk); again != first {
		t.Error("WithLock with the same context and lock made a new context")
	}
	work := func(n int) {
		for range n {
			if got, ok := dlock.FromContext(dlock.WithLock(service, lk)); !ok || got != lk {
				t.Fatal("the lock is not carried")
			}
		}
	}
	work(1000)
	before := heapAlloc()
	const n = 50_000
	work(n)
	if per := float64(int64(heapAlloc())-int64(before)) / n; per > 16 {
		t.Errorf("each WithLock from the same context keeps %.0f bytes until the lock is released", per)
	}

	other, cancelOther := context.WithCancel(service)
	defer cancelOther()
	second := dlock.WithLock(other, lk)
	if second == first {
		t.Error("WithLock from another context returned the first one's context")
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, ctx := range []context.Context{first, second} {
		wantDone(t, ctx, dlock.ErrNotHeld, "a WithLock context after Release")
	}
	// After the lease, a new call gives an ended context, not a live one kept from before.
	wantDone(t, dlock.WithLock(service, lk), dlock.ErrNotHeld, "WithLock after Release")
}

// mapCtx is a context passed by value that carries a map: a type that is not comparable, as
// the context types of some frameworks are.
type mapCtx struct {
	context.Context
	tags map[string]string
}

// WithLock with a context whose type is comparable but whose value is not (context.
// WithoutCancel's struct, an interface field, holding a mapCtx) makes a new context each time
// rather than compare it with the earlier ones, which would panic.
func TestWithLockUncomparableContextValue(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	base := context.WithoutCancel(mapCtx{Context: ctx, tags: map[string]string{"a": "b"}})
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("WithLock panicked on its second call with the same context: %v", p)
		}
	}()
	for range 2 {
		if got, ok := dlock.FromContext(dlock.WithLock(base, lk)); !ok || got != lk {
			t.Fatal("the lock is not carried")
		}
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A Refresh (a heartbeat goroutine extending a WithTTL lock) or a re-entrant Acquire (a
// goroutine given the WithLock context) that runs just as another goroutine releases the
// last hold finds the key freed in Redis: that is a release, not a loss. Neither the lease
// nor the Client may report the lock lost; Refresh answers ErrNotHeld, the re-entry is not
// obtained (its context is ending), as after the release.
func TestRaceWithLastReleaseIsNoLoss(t *testing.T) {
	for _, tc := range []struct {
		name string
		race func(ctx context.Context, c *dlock.Client, lk *dlock.Lock, key string) error
		want error
	}{
		{"Refresh", func(ctx context.Context, _ *dlock.Client, lk *dlock.Lock, _ string) error {
			return lk.Refresh(ctx, 5*time.Second)
		}, dlock.ErrNotHeld},
		{"re-entrant Acquire", func(ctx context.Context, c *dlock.Client, lk *dlock.Lock, key string) error {
			in, err := c.TryAcquire(dlock.WithLock(ctx, lk), key)
			if in != nil {
				_ = in.Release(ctx)
			}
			return err
		}, dlock.ErrNotObtained},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log locktest.LogBuffer
			_, rdb, _ := setup(t)
			c := newClient(t, rdb, dlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			ctx := testContext(t, 60*time.Second)
			key := uniqueKey(t)
			for i := range 300 {
				lk, err := c.Acquire(ctx, key, dlock.WithTTL(10*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var rerr, oerr error
				wg.Add(2)
				go func() { defer wg.Done(); rerr = lk.Release(ctx) }()
				go func() { defer wg.Done(); oerr = tc.race(ctx, c, lk, key) }()
				wg.Wait()
				if rerr != nil {
					t.Fatalf("Release: %v", rerr)
				}
				if oerr != nil && !errors.Is(oerr, tc.want) || errors.Is(oerr, dlock.ErrLockLost) {
					t.Fatalf("round %d: %s racing the release: %v, want nil or %v", i, tc.name, oerr, tc.want)
				}
				if err := lk.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
					t.Fatalf("round %d: Err after the release %v, want ErrNotHeld", i, err)
				}
			}
			if strings.Contains(log.String(), "lock lost") {
				t.Fatalf("a released lock was logged as lost: %s", log.String())
			}
		})
	}
}
