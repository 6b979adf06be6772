package dlock_test

import (
	"context"
	"errors"
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
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
				total += n
			}
		}
	}
	return total
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

func TestFixedTTLAndRefresh(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key, dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl < time.Second {
		t.Fatalf("PTTL after Refresh = %v", pttl)
	}
	if err := lk.Refresh(ctx, 0); err == nil {
		t.Fatal("Refresh(0) gave no error")
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
