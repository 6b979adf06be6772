package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// lockKeyOf finds the Redis key holding the lock for key (tests only: it uses KEYS).
func lockKeyOf(t *testing.T, rdb *redis.Client, key string) string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*{"+key+"}:lock").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("lock key of %q: %v %v", key, keys, err)
	}
	return keys[0]
}

func TestWatchdogKeepsLock(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithLease(time.Second))
	other := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	for time.Since(held) < 4*time.Second {
		if l2, err := other.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			if l2 != nil {
				_ = l2.Release(ctx)
			}
			t.Fatalf("another client got the lock after %v: %v", time.Since(held), err)
		}
		if lk.Err() != nil {
			t.Fatalf("lock lost while renewed: %v", lk.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// After Release, no script call may reach Redis: nothing else runs on this server now.
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, rdb)
	time.Sleep(1500 * time.Millisecond) // more than four renewal periods
	if after := scriptCalls(t, rdb); after != before {
		t.Fatalf("%d script calls reached Redis after Release", after-before)
	}
}

// scriptCalls is the number of EVAL and EVALSHA calls the server has answered.
func scriptCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	calls := commandCalls(t, rdb)
	return calls["evalsha"] + calls["eval"]
}

// commandCalls is how many times the server ran each command, from INFO commandstats.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(stats, ",", 2)[0])
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}

func TestLossDetectedOnDelete(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithLease(time.Second))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	work := dlock.WithLock(ctx, lk)
	if err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err(); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-lk.Done():
		t.Logf("loss detected %v after the delete (renewal period %v)", time.Since(deleted), time.Second/3)
	case <-time.After(3 * time.Second):
		t.Fatal("Done not closed after the lock key was deleted")
	}
	<-work.Done()
	if cause := context.Cause(work); !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("cause = %v, want ErrLockLost", cause)
	}
	if err := lk.Release(ctx); !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release after loss: %v", err)
	}
}

func TestLossDetectedOnRestart(t *testing.T) {
	srv, _, c := setup(t, dlock.WithLease(time.Second))
	ctx := testContext(t, 20*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after a restart without persistence")
	}
	if !errors.Is(lk.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err = %v", lk.Err())
	}
	if err := lk.Release(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Release after loss: %v", err)
	}
}

// A holder that cannot reach Redis gives the lock up on its own clock before Redis lets a
// rival have it.
func TestCutOffHolderLearnsFirst(t *testing.T) {
	srv, rdb, c := setup(t, dlock.WithLease(time.Second))
	rival := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(ctx, 2500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l2, err := rival.Acquire(ctx, key)
		if err != nil {
			t.Error(err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l2.Release(ctx)
	}()
	var lostAt time.Time
	select {
	case <-lk.Done():
		lostAt = time.Now()
	case <-time.After(5 * time.Second):
		t.Fatal("cut-off holder never learned it lost the lock")
	}
	rivalAt := <-got
	if rivalAt.IsZero() || !lostAt.Before(rivalAt) {
		t.Fatalf("rival obtained at %v, holder learned at %v", rivalAt, lostAt)
	}
	t.Logf("holder learned %v before the rival obtained the lock", rivalAt.Sub(lostAt))
}

func TestNonOwnerReleaseAndRefresh(t *testing.T) {
	_, rdb, c := setup(t)
	rival := newClient(t, rdb)
	ctx := testContext(t, 10*time.Second)
	for _, op := range []string{"release", "refresh", "complete"} {
		t.Run(op, func(t *testing.T) {
			key := uniqueKey(t)
			a, err := c.Acquire(ctx, key, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			// The lock is taken over behind a's back.
			if err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err(); err != nil {
				t.Fatal(err)
			}
			b, err := rival.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			switch op {
			case "release":
				err = a.Release(ctx)
			case "refresh":
				err = a.Refresh(ctx, time.Minute)
			case "complete":
				err = a.Complete(ctx, []byte("x"), time.Minute)
			}
			if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
				t.Fatalf("%s by a non-owner: %v", op, err)
			}
			if _, ok, _ := rival.Completed(ctx, key); ok {
				t.Fatal("a non-owner stored a completion record")
			}
			// The rival's lease (the Client default, 30 s) is not extended to a's minute.
			if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl <= 0 || pttl > dlock.DefaultLease {
				t.Fatalf("rival's lock PTTL %v after the %s by a non-owner, want %v at most", pttl, op, dlock.DefaultLease)
			}
			if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("holder's lock was touched: %v", err)
			}
			if b.Err() != nil {
				t.Fatal(b.Err())
			}
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// WithTTL(d <= 0) is no fixed lease: the Client lease, renewed by the watchdog, as
// ginlock.WithTTL(0) means; a positive d below MinLease is raised to it, so the lock is not
// over on the holder's clock before Acquire returns.
func TestWithTTLEdges(t *testing.T) {
	const lease = 1500 * time.Millisecond // renewed every 500 ms
	_, rdb, c := setup(t, dlock.WithLease(lease))
	ctx := testContext(t, 20*time.Second)
	for _, d := range []time.Duration{0, -time.Second} {
		key := uniqueKey(t)
		lk, err := c.Acquire(ctx, key, dlock.WithTTL(d))
		if err != nil {
			t.Fatal(err)
		}
		// Renewed: Redis sees the lease extended (its PTTL goes up, which time alone never
		// does) while the lock is held; a fixed lease is never extended and ends instead.
		if !renewedInRedis(ctx, t, rdb, lk, redisName(key, "lock")) {
			t.Fatalf("WithTTL(%v): %v, the lease ended unrenewed; want the Client lease, renewed", d, lk.Err())
		}
		if err := lk.Err(); err != nil {
			t.Fatalf("WithTTL(%v): %v after a renewal, want the lock held", d, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The 30 ms lease may be over by the time the test looks on a loaded machine: then take
	// it again. Every look checks PTTL <= MinLease; one must find the lock still live.
	for try := 0; ; try++ {
		key := uniqueKey(t)
		lk, err := c.Acquire(ctx, key, dlock.WithTTL(time.Nanosecond))
		if err != nil {
			t.Fatal(err)
		}
		live := lk.Err() == nil
		pttl := rdb.PTTL(ctx, redisName(key, "lock")).Val()
		if pttl > dlock.MinLease {
			t.Fatalf("WithTTL(1ns): PTTL %v, want MinLease (%v) at most", pttl, dlock.MinLease)
		}
		if live && pttl > 0 {
			<-lk.Done() // a fixed lease: it ends, not renewed
			if !errors.Is(lk.Err(), dlock.ErrLockLost) {
				t.Fatalf("fixed lease ended with %v", lk.Err())
			}
			break
		}
		_ = lk.Release(ctx)
		if try == 20 {
			t.Fatalf("WithTTL(1ns): the lock was over at every look as Acquire returned (last: Err %v, PTTL %v)", lk.Err(), pttl)
		}
	}
}

// renewedInRedis waits until Redis sees lk's lease at lockKey extended: its PTTL goes up
// between two looks, as only a renewal makes it. It reports false if the lease ends first.
func renewedInRedis(ctx context.Context, t *testing.T, rdb *redis.Client, lk *dlock.Lock, lockKey string) bool {
	t.Helper()
	last := rdb.PTTL(ctx, lockKey).Val()
	for {
		select {
		case <-lk.Done():
			return false
		case <-ctx.Done():
			t.Fatalf("no renewal seen in Redis: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
		pttl := rdb.PTTL(ctx, lockKey).Val()
		if pttl > last {
			return true
		}
		last = pttl
	}
}

// New panics on a nil Redis client, a programming error, rather than fail, or crash a
// background goroutine, at the first Acquire.
func TestNewNilClientPanics(t *testing.T) {
	for _, rdb := range []redis.UniversalClient{nil, (*redis.Client)(nil), (*redis.ClusterClient)(nil)} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "nil Redis client") {
					t.Errorf("New(%T(nil)) panic %v, want one naming the nil Redis client", rdb, p)
				}
			}()
			_ = dlock.New(rdb).Close()
		}()
	}
}

// New refuses a *redis.Ring at start-up: a Ring shards keys over independent servers, so the
// watchdog's batched renewal and the waiters' channel would reach the wrong one, and locks
// would be reported lost at their first renewal.
func TestNewRingPanics(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	defer func() { _ = ring.Close() }()
	defer func() {
		if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "*redis.Ring") {
			t.Errorf("New(ring) panic %v, want one naming *redis.Ring", p)
		}
	}()
	_ = dlock.New(ring).Close()
}

func TestFixedTTLAndRefresh(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	// The fixed lease leaves a second to Refresh it in; Refresh takes it to 4 s, and Redis
	// then has more than the first second left (seconds of slack for a slow machine).
	lk, err := c.Acquire(ctx, key, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl <= time.Second {
		t.Fatalf("PTTL after Refresh(4s) = %v, want more than the 1 s the lock was taken for", pttl)
	}
	for _, ttl := range []time.Duration{0, time.Millisecond, dlock.MinLease - 1} {
		if err := lk.Refresh(ctx, ttl); err == nil || !strings.Contains(err.Error(), "at least") {
			t.Fatalf("Refresh(%v) = %v, want an error: a lease under MinLease is over on the holder's clock at once", ttl, err)
		}
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("a refused Refresh changed the lock: %v", err)
	}
	if err := lk.Refresh(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("fixed lease did not end")
	}
	if !errors.Is(lk.Err(), dlock.ErrLockLost) || !strings.Contains(lk.Err().Error(), "WithTTL") {
		t.Fatalf("Err after expiry: %v; want ErrLockLost saying the WithTTL lease ran out", lk.Err())
	}
	// The holder learns a drift margin before Redis frees the key: wait for it.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if l2, err := c.Acquire(wctx, key); err != nil {
		t.Fatalf("key not free after the fixed lease: %v", err)
	} else {
		_ = l2.Release(ctx)
	}
}

// A WithTTL(d) lock expires d after it was obtained, also when it was obtained by hand-off:
// the hand-off grants min(d, claim lease), and the confirmation renewal a third into that
// lease sets what is left of d, not d again. With d within the claim lease there is nothing
// to confirm.
func TestHandedOffWithTTLKeepsItsTTL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry time.Duration // the claim lease is 3 retry intervals
		ttl   time.Duration
		check time.Duration // when to read the lease left in Redis
	}{
		{"ttl within the claim lease", 5 * time.Second, 6 * time.Second, 3500 * time.Millisecond},
		{"ttl beyond the claim lease", 3 * time.Second, 20 * time.Second, 4 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rdb, _ := setup(t)
			ctx := testContext(t, 30*time.Second)
			releaser := newClient(t, rdb, dlock.WithRetryInterval(tc.retry))
			waiter := newClient(t, rdb)
			key := uniqueKey(t)
			held, err := releaser.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got := acquireAsync(t, waiter, ctx, key, dlock.WithTTL(tc.ttl))
			for rdb.ZCard(ctx, redisName(key, "q")).Val() != 1 {
				if ctx.Err() != nil {
					t.Fatal("waiter not queued")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lk := <-got
			if lk == nil {
				t.FailNow()
			}
			obtained := time.Now()
			defer func() { _ = lk.Release(ctx) }()
			time.Sleep(tc.check) // past the confirmation, a third into the claim lease
			left := tc.ttl - time.Since(obtained)
			if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl > left+time.Second || pttl < left-time.Second {
				t.Fatalf("%v after obtaining a WithTTL(%v) lock by hand-off, Redis keeps it %v more; want about %v",
					time.Since(obtained).Round(time.Millisecond), tc.ttl, pttl, left.Round(time.Millisecond))
			}
			if lk.Err() != nil {
				t.Fatalf("lock lost before its ttl: %v", lk.Err())
			}
		})
	}
}

// A lock key overwritten with a value of another type (a colliding application key, a stale
// layout) is a lost lock, reported at the next renewal as any other loss; and it does not
// fail the renewals of the other locks sent in the same call.
func TestOverwrittenWithOtherTypeIsLost(t *testing.T) {
	const lease = 3 * time.Second // renewed every second, all three locks in one call
	_, rdb, c := setup(t, dlock.WithLease(lease))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	var others []*dlock.Lock
	for i := range 2 {
		o, err := c.Acquire(ctx, key+"-other-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = o.Release(ctx) }()
		others = append(others, o)
	}
	if err := rdb.Set(ctx, lockKeyOf(t, rdb, key), "overwritten", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
		if err := lk.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "renewal found") {
			t.Fatalf("overwritten lock ended with %v, want a loss found by its renewal", err)
		}
	case <-time.After(lease - lease/10):
		t.Fatalf("overwritten lock not reported lost by a renewal before its lease ran out (%v)", lk.Err())
	}
	// A whole lease from now on, a lock Redis still has was renewed meanwhile (every second):
	// after the overwrite, in the calls that carried the overwritten key or after them.
	time.Sleep(lease)
	for i, o := range others {
		if err := o.Err(); err != nil {
			t.Fatalf("other lock %d: %v", i, err)
		}
		if pttl := rdb.PTTL(ctx, redisName(o.Key(), "lock")).Val(); pttl <= 0 {
			t.Fatalf("other lock %d not renewed within a lease after the overwrite: PTTL %v", i, pttl)
		}
	}
}
