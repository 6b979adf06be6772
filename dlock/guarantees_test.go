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
	"github.com/lockguard/lockguard/internal/locktest"
)

// Zero configuration gives locks the documented default lease (DefaultLease, 30 s) in Redis,
// and WithLease never sets a lease below MinLease.
func TestDefaultLeaseAndMinLease(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The read follows the acquisition at once; 20 s of slack keep a stalled machine from
	// failing it, while any other lease (10 s, a minute) still fails it.
	if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl > dlock.DefaultLease || pttl < dlock.DefaultLease-20*time.Second {
		t.Fatalf("lock of a zero-config Client has PTTL %v, want the default lease %v", pttl, dlock.DefaultLease)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}

	short := newClient(t, rdb, dlock.WithLease(time.Nanosecond))
	// A 30 ms lease renewed every 10 ms may be lost on a loaded machine: then take it again.
	for try := 0; ; try++ {
		key := uniqueKey(t)
		lk, err := short.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		pttl := rdb.PTTL(ctx, redisName(key, "lock")).Val()
		_ = lk.Release(ctx)
		if pttl > dlock.MinLease {
			t.Fatalf("WithLease(1ns): PTTL %v, want at most MinLease (%v)", pttl, dlock.MinLease)
		}
		if pttl > 0 {
			break
		}
		if try == 20 {
			t.Fatal("WithLease(1ns): the lock was gone at every look")
		}
	}
}

// The claim lease of a hand-off is three retry intervals of the releasing Client (1 s by
// default; WithRetryInterval below 10 ms is raised to 10 ms), capped by the waiter's own
// lease; a waiter that never confirms the lock it was handed blocks the key no longer than
// that. The waiter here is written into the line by hand, as docs/dlock.md lays it out, so
// that nothing confirms the hand-off.
func TestUnconfirmedHandOffEndsAfterThreeRetryIntervals(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := testContext(t, 30*time.Second)
	for _, tc := range []struct {
		name      string
		opts      []dlock.Option
		waiterTTL int
		wantClaim int // ms
	}{
		{"default retry interval", nil, 60_000, 3000},
		{"retry interval below 10 ms", []dlock.Option{dlock.WithRetryInterval(time.Nanosecond)}, 60_000, 30},
		{"retry interval 250 ms", []dlock.Option{dlock.WithRetryInterval(250 * time.Millisecond)}, 60_000, 750},
		{"waiter lease shorter than the claim", nil, 500, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, rdb, tc.opts...)
			key := uniqueKey(t)
			lk, err := c.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			base := "lockguard:{" + key + "}:"
			ch := srv.Client(t).Subscribe(ctx, base+"ch")
			defer func() { _ = ch.Close() }()
			if _, err := ch.Receive(ctx); err != nil { // the subscription's confirmation
				t.Fatal(err)
			}
			now, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			const waiter = "ghost-waiter-never-confirms"
			member := fmt.Sprintf("%s:%d:0", waiter, tc.waiterTTL)
			if err := rdb.ZAdd(ctx, base+"q", redis.Z{Score: float64(now.UnixMicro()), Member: member}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ZAdd(ctx, base+"qd", redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: member}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, base+"lock", "w", "1").Err(); err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			msg, err := ch.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(msg.Payload)
			if len(f) != 3 || f[0] != waiter {
				t.Fatalf("hand-off notice %q, want one to %s", msg.Payload, waiter)
			}
			if claim, _ := strconv.Atoi(f[2]); claim != tc.wantClaim {
				t.Fatalf("claim lease %d ms, want %d ms", claim, tc.wantClaim)
			}
			// A short claim lease may be over by now (the key then gone): only a live one is
			// looked at.
			// The owner is read first: a key still there after it was there for that read.
			owner, _ := locktest.Holds(t, rdb, base+"lock")
			pttl := rdb.PTTL(ctx, base+"lock").Val()
			if pttl > time.Duration(tc.wantClaim)*time.Millisecond {
				t.Fatalf("handed-off lock PTTL %v, want at most the claim lease %d ms", pttl, tc.wantClaim)
			}
			if (pttl > 0 || tc.wantClaim >= 3000) && owner != waiter {
				t.Fatalf("lock owner after the hand-off %q (PTTL %v), want %s", owner, pttl, waiter)
			}
			if tc.wantClaim >= 3000 {
				if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
					t.Fatalf("TryAcquire of the handed-off lock: %v, want ErrNotObtained", err)
				}
			}
			// Nobody confirms: the key is free again once the claim lease has run out.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			got, err := c.Acquire(wctx, key)
			if err != nil {
				t.Fatalf("key still blocked by the unconfirmed hand-off: %v", err)
			}
			if err := got.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Complete refuses a retention that is not positive before anything reaches Redis: the hold
// stays held, and no record is stored.
func TestCompleteRefusesNonPositiveRetention(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, retention := range []time.Duration{0, -time.Second} {
		err := lk.Complete(ctx, []byte("x"), retention)
		if err == nil || errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Complete(retention %v) on a held lock: %v, want a retention error", retention, err)
		}
		if !strings.Contains(err.Error(), "retention") {
			t.Errorf("Complete(retention %v): %v does not name the retention", retention, err)
		}
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("a refused Complete changed the lock: %v", err)
	}
	if _, err := newClient(t, rdb).TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a refused Complete freed the key: %v", err)
	}
	if _, ok, err := c.Completed(ctx, key); err != nil || ok {
		t.Fatalf("a refused Complete stored a record: ok %v err %v", ok, err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Calls on a hold that was released answer ErrNotHeld (not a loss), and change nothing: a
// released re-entrant hold while the outer one is held, and the whole lease once released.
func TestReleasedHoldAnswersNotHeld(t *testing.T) {
	_, _, c := setup(t)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(dlock.WithLock(ctx, outer), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(what string, lk *dlock.Lock) {
		t.Helper()
		if err := lk.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("%s: Err %v, want ErrNotHeld", what, err)
		}
		for name, err := range map[string]error{
			"Release":  lk.Release(ctx),
			"Refresh":  lk.Refresh(ctx, time.Minute),
			"Complete": lk.Complete(ctx, []byte("late"), time.Minute),
		} {
			if !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
				t.Errorf("%s: %s = %v, want ErrNotHeld", what, name, err)
			}
		}
	}
	check("released inner hold", inner)
	if err := outer.Err(); err != nil || outer.HoldCount() != 1 {
		t.Fatalf("outer hold after the inner release: err %v holds %d", err, outer.HoldCount())
	}
	select {
	case <-outer.Done():
		t.Fatal("Done closed while the outer hold is held")
	default:
	}
	if _, ok, _ := c.Completed(ctx, key); ok {
		t.Fatal("Complete on a released hold stored a record")
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check("released lease", outer)
	if _, ok, _ := c.Completed(ctx, key); ok {
		t.Fatal("Complete on a released lease stored a record")
	}
	if n := outer.HoldCount(); n != 0 {
		t.Fatalf("HoldCount after the last release %d, want 0", n)
	}
}

// A watchdog-renewed lock taken over behind its holder's back (its key deleted and taken by a
// rival) is reported lost at a renewal, through Done, Err, HoldCount and the WithLock
// context; the renewal checks the owner, so it neither extends nor frees the rival's lock.
func TestRenewalOfTakenOverLockReportsLossAndLeavesRival(t *testing.T) {
	_, rdb, c := setup(t, dlock.WithLease(3*time.Second)) // renewed every second
	rival := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	work := dlock.WithLock(ctx, lk)
	if err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err(); err != nil {
		t.Fatal(err)
	}
	const rivalTTL = 10 * time.Second
	theirs, err := rival.TryAcquire(ctx, key, dlock.WithTTL(rivalTTL))
	if err != nil {
		t.Fatalf("rival after the delete: %v", err)
	}
	select {
	case <-lk.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed: the holder was not told its lock was taken over")
	}
	if err := lk.Err(); !errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Err after the takeover %v, want ErrLockLost", err)
	}
	if n := lk.HoldCount(); n != 0 {
		t.Fatalf("HoldCount after the loss %d, want 0", n)
	}
	wantDone(t, work, dlock.ErrLockLost, "the holder's WithLock context")
	if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl <= 0 || pttl > rivalTTL {
		t.Fatalf("rival's lock PTTL %v after the old holder's renewal, want its own %v at most", pttl, rivalTTL)
	}
	if err := lk.Release(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("old holder's Release %v, want ErrLockLost", err)
	}
	if err := theirs.Err(); err != nil {
		t.Fatalf("rival's lock after the old holder's renewal and release: %v", err)
	}
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("the old holder freed the rival's lock: %v", err)
	}
	if err := theirs.Release(ctx); err != nil {
		t.Fatalf("rival's Release: %v", err)
	}
}

// Waiters are served in arrival order, across Clients; a holder that releases and takes the
// lock again goes behind them (its TryAcquire right after the release is refused), and every
// grant has a higher fencing token than the one before.
func TestWaitersServedInArrivalOrder(t *testing.T) {
	_, rdb, holderC := setup(t)
	ctx := testContext(t, 60*time.Second)
	key := uniqueKey(t)
	qkey := redisName(key, "q")
	first, err := holderC.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 5
	type grant struct {
		who   int
		token int64
	}
	order := make(chan grant, waiters+1)
	proceed := make(chan struct{})
	for i := range waiters {
		c := newClient(t, rdb)
		if i%2 == 1 {
			c = holderC // some waiters share the holder's Client: told by the release's reply
		}
		go func() {
			lk, err := c.Acquire(ctx, key)
			if err != nil {
				t.Error(err)
				order <- grant{who: -1}
				return
			}
			order <- grant{who: i, token: lk.Token()}
			select {
			case <-proceed:
			case <-ctx.Done(): // the test failed
			}
			if err := lk.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
		waitLine(t, ctx, rdb, qkey, int64(i+1))
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if lk, err := holderC.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		if lk != nil {
			_ = lk.Release(ctx)
		}
		t.Fatalf("TryAcquire right after the release jumped the line: %v", err)
	}
	last := first.Token()
	again := make(chan *dlock.Lock, 1)
	for n := range waiters {
		g := <-order
		if g.who != n {
			t.Fatalf("grant %d went to waiter %d, want waiter %d (arrival order)", n, g.who, n)
		}
		if g.token <= last {
			t.Errorf("waiter %d token %d, not above the previous %d", n, g.token, last)
		}
		last = g.token
		if n == 0 {
			// The former holder asks again while waiter 0 holds: it joins behind the rest.
			go func() {
				lk, err := holderC.Acquire(ctx, key)
				if err != nil {
					t.Error(err)
				}
				again <- lk
			}()
			waitLine(t, ctx, rdb, qkey, waiters)
		}
		proceed <- struct{}{}
	}
	lk := <-again
	if lk == nil {
		t.FailNow()
	}
	if lk.Token() <= last {
		t.Errorf("former holder's token %d, not above the last waiter's %d", lk.Token(), last)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitLine waits until the line at qkey holds n waiters.
func waitLine(t *testing.T, ctx context.Context, rdb *redis.Client, qkey string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.ZCard(ctx, qkey).Val() != n {
		if time.Now().After(deadline) {
			t.Fatalf("line %s: %d waiters, want %d", qkey, rdb.ZCard(ctx, qkey).Val(), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A lock whose holder's lease ran out while a waiter stands in line goes to that waiter:
// TryAcquire of a third party, free as the lock looks, does not jump the line.
func TestExpiredLockWithWaiterIsNotFreeForTryAcquire(t *testing.T) {
	_, rdb, c := setup(t)
	waiterC := newClient(t, rdb, dlock.WithRetryInterval(time.Hour))
	third := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	// A lease that does not run out by itself during the test, and is not renewed: the test
	// ends it in Redis as its expiry does, deleting the lock hash, once the waiter is in line.
	lk, err := c.Acquire(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(t, waiterC, ctx, key)
	waitQueued(t, rdb, ctx, key)
	if n, err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Result(); err != nil || n != 1 {
		t.Fatalf("deleting the lock hash (the lease running out in Redis): %d deleted, %v", n, err)
	}
	if l3, err := third.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		if l3 != nil {
			_ = l3.Release(ctx)
		}
		t.Fatalf("TryAcquire of an expired lock with a waiter in line: %v, want ErrNotObtained", err)
	}
	w := received(t, got)
	if w.Token() <= lk.Token() {
		t.Errorf("waiter's token %d not above the expired holder's %d", w.Token(), lk.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// refuseScripts fails, without sending them, the script calls whose context carries
// refuseScript: a call that never reached Redis (a connection refused, a broken link).
type refuseScripts struct{}

type refuseScript struct{}

func (refuseScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (refuseScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && ctx.Value(refuseScript{}) != nil {
			return errors.New("connection refused (simulated)")
		}
		return next(ctx, cmd)
	}
}
func (refuseScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A Release that could not reach Redis returns ErrUnavailable and stops the renewal: the
// lock, still held in Redis, expires at the end of its lease instead of being renewed for
// a holder that let it go, and a rival gets it.
func TestFailedReleaseStopsRenewal(t *testing.T) {
	srv, rdb, _ := setup(t)
	hooked := srv.Client(t)
	hooked.AddHook(refuseScripts{})
	c := newClient(t, hooked, dlock.WithLease(time.Second)) // renewed every 333 ms
	rival := newClient(t, rdb)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(context.WithValue(ctx, refuseScript{}, true)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Release that did not reach Redis: %v, want ErrUnavailable", err)
	}
	if owner, _ := locktest.Holds(t, rdb, lockKeyOf(t, rdb, key)); owner == "" {
		t.Fatal("the refused release freed the lock: the test proves nothing")
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("Done still open after the last hold's Release failed: the lease is still watched")
	}
	if _, err := rival.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("rival right after the failed release: %v, want ErrNotObtained (the lock runs out its lease)", err)
	}
	// Ten leases: a lock still renewed would never be free within them.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	theirs, err := rival.Acquire(wctx, key)
	if err != nil {
		t.Fatalf("the lock of a failed Release was still held after ten leases: %v", err)
	}
	if err := theirs.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A completion record is kept for the retention given to Complete, and no longer: then
// Completed no longer finds it, and an acquisition with SkipCompleted takes the lock again.
func TestCompletionRecordKeptForRetention(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key, dlock.SkipCompleted())
	if err != nil {
		t.Fatal(err)
	}
	// Long enough for the two looks within it on a slow machine; the record then has to go.
	const retention = 2 * time.Second
	if err := lk.Complete(ctx, []byte("receipt"), retention); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, redisName(key, "done")).Val(); pttl <= 0 || pttl > retention {
		t.Fatalf("record PTTL %v, want the retention %v at most", pttl, retention)
	}
	if _, err := c.Acquire(ctx, key, dlock.SkipCompleted()); !errors.Is(err, dlock.ErrCompleted) {
		t.Fatalf("SkipCompleted within the retention: %v, want ErrCompleted", err)
	}
	deadline := time.Now().Add(retention + 10*time.Second)
	for {
		_, ok, err := c.Completed(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record still there %v after a retention of %v", retention+10*time.Second, retention)
		}
		time.Sleep(20 * time.Millisecond)
	}
	again, err := c.Acquire(ctx, key, dlock.SkipCompleted())
	if err != nil {
		t.Fatalf("SkipCompleted after the retention: %v, want the lock", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
