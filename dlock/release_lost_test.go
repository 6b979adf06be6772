package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// appliedButFailed applies every renewal in Redis and then loses the reply (a timeout
// after the script ran): Redis keeps extending the lease while our clock lets it run out.
type appliedButFailed struct{ backend }

func (b *appliedButFailed) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	if _, err := b.backend.renew(ctx, rs); err != nil {
		return nil, err
	}
	return nil, unavailable("renew", errors.New("injected: reply lost"))
}

// Release of a lease lost on our clock only (Redis still has it as ours): every hold released
// after the loss is taken off in Redis too, so the last one frees the lock there, re-entrant
// holds included, instead of leaving it held to the end of its lease.
func TestReleaseOfLostLeaseFreesEveryHold(t *testing.T) {
	c, srv, ctx := testClient(t, 600*time.Millisecond, func(b backend) backend { return &appliedButFailed{backend: b} })
	rdb := srv.Client(t)
	key := t.Name()
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(WithLock(ctx, outer), key)
	if err != nil {
		t.Fatal(err)
	}
	<-outer.Done()
	if !errors.Is(outer.Err(), ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", outer.Err())
	}
	lockKey := "lockguard:{" + key + "}:lock"
	o, err := rdb.HGet(ctx, lockKey, "o").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err) // a Redis failure is not a scenario missed
	}
	if o != outer.l.owner {
		t.Skipf("Redis no longer has the lock as ours (owner %q): scenario not reached", o)
	}
	if err := inner.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("inner Release = %v", err)
	}
	if err := outer.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("outer Release = %v", err)
	}
	other := New(rdb)
	defer other.Close()
	lk, err := other.TryAcquire(ctx, key)
	if err == nil {
		_ = lk.Release(ctx)
		return
	}
	h, _ := rdb.HGet(ctx, lockKey, "h").Result()
	pttl, _ := rdb.PTTL(ctx, lockKey).Result()
	t.Fatalf("both holds of a lease lost on our clock (still ours in Redis) were released, yet "+
		"Redis keeps it (h=%s, pttl %v): another client gets %v", h, pttl, err)
}
