package dlock_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

func TestClose(t *testing.T) {
	_, rdb, _ := setup(t)
	c := dlock.New(rdb)
	ctx := testContext(t, 10*time.Second)
	lk, err := c.Acquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := c.Acquire(ctx, uniqueKey(t), dlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	work := dlock.WithLock(ctx, lk)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	default:
		t.Fatal("a lock held at Close is still reported held: nothing renews it any more")
	}
	wantDone(t, work, dlock.ErrLockLost, "the lock's context when Close returned")
	// A WithTTL lock was never renewed: Close leaves it its lease, which then ends.
	if err := fixed.Err(); err != nil {
		t.Fatalf("WithTTL lock right after Close: %v, want still held for its TTL", err)
	}
	select {
	case <-fixed.Done():
		if !errors.Is(fixed.Err(), dlock.ErrLockLost) {
			t.Fatalf("WithTTL lock at the end of its TTL: %v, want ErrLockLost", fixed.Err())
		}
	case <-ctx.Done():
		t.Fatal("the WithTTL lock's Done did not close when its TTL ended")
	}
	if _, err := c.Acquire(ctx, uniqueKey(t)); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if _, err := c.TryAcquire(ctx, uniqueKey(t)); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v", err)
	}
	if _, _, err := c.Completed(ctx, uniqueKey(t)); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Completed after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestPrefix(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := testContext(t, 5*time.Second)
	a := newClient(t, rdb, dlock.WithPrefix("app-a"))
	b := newClient(t, rdb, dlock.WithPrefix("app{b}"))
	key := uniqueKey(t)
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Another prefix is another namespace: the same key is free there.
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("prefixes share locks: %v", err)
	}
	for _, pattern := range []string{"app-a:{" + key + "}:lock", "app%7Bb%7D:{" + key + "}:lock"} {
		if n := len(rdb.Keys(ctx, pattern).Val()); n != 1 {
			t.Errorf("%d keys match %s", n, pattern)
		}
	}
	_ = la.Release(ctx)
	_ = lb.Release(ctx)
}

func TestLoggerReportsLoss(t *testing.T) {
	var buf locktest.LogBuffer
	_, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithLease(300*time.Millisecond),
		dlock.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := testContext(t, 5*time.Second)
	key := "user-secret-" + uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err()
	<-lk.Done()
	out := buf.String()
	if !strings.Contains(out, "lock lost") || !strings.Contains(out, "key_hash=") {
		t.Fatalf("log: %q", out)
	}
	if strings.Contains(out, "user-secret") {
		t.Fatalf("the raw key reached the log: %q", out)
	}
}
