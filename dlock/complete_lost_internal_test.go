package dlock

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Complete on a lease lost on our clock only (renewals applied in Redis, their replies lost)
// stores the record with the release, as a plain Complete would: the next acquisition with
// SkipCompleted gets the record, not the lock, and the work is not done twice.
func TestCompleteOfLostLeaseKeepsRecord(t *testing.T) {
	c, srv, ctx := testClient(t, 600*time.Millisecond, func(b backend) backend { return &appliedButFailed{backend: b} })
	rdb := srv.Client(t)
	key := t.Name()
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	<-lk.Done()
	if !errors.Is(lk.Err(), ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", lk.Err())
	}
	lockKey := "lockguard:{" + key + "}:lock"
	o, err := rdb.HGet(ctx, lockKey, "o").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err) // a Redis failure is not a scenario missed
	}
	if o != lk.l.owner {
		t.Skipf("Redis no longer has the lock as ours (owner %q): scenario not reached", o)
	}
	cerr := lk.Complete(ctx, []byte("done"), time.Minute)
	t.Logf("Complete = %v", cerr)
	other := New(rdb)
	defer other.Close()
	lk2, err := other.TryAcquire(ctx, key, SkipCompleted())
	if err == nil {
		defer func() { _ = lk2.Release(ctx) }()
		_, stored, _ := other.Completed(ctx, key)
		t.Fatalf("Complete of a lease still ours in Redis freed the key but stored no record "+
			"(record stored: %v): the next SkipCompleted acquisition gets the lock and repeats the work", stored)
	}
}
