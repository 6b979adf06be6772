package dlock

import (
	"errors"
	"testing"
	"time"
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
	// appliedButFailed keeps the lock ours in Redis long after our clock lost it.
	lockedAsOurs(ctx, t, rdb, key, lk.l.owner)
	if cerr := lk.Complete(ctx, []byte("done"), time.Minute); !errors.Is(cerr, ErrLockLost) {
		t.Fatalf("Complete = %v, want the loss (ErrLockLost)", cerr)
	}
	other := New(rdb)
	defer other.Close()
	lk2, err := other.TryAcquire(ctx, key, SkipCompleted())
	if err == nil {
		defer func() { _ = lk2.Release(ctx) }()
		_, stored, _ := other.Completed(ctx, key)
		t.Fatalf("Complete of a lease still ours in Redis freed the key but stored no record "+
			"(record stored: %v): the next SkipCompleted acquisition gets the lock and repeats the work", stored)
	}
	var ce *CompletedError
	if !errors.As(err, &ce) || string(ce.Record) != "done" {
		t.Fatalf("after Complete of a lease still ours in Redis, a SkipCompleted acquisition gets %v, "+
			"want the record %q (a lock left held in Redis holds the waiters up to the end of its lease)", err, "done")
	}
}
