package dlock

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// appliedButFailed applies every renewal in Redis and then loses the reply (a timeout
// after the script ran): Redis keeps extending the lease while our clock lets it run out.
//
// In Redis the lease is set to appliedTTL, at the acquisition and at every renewal, whatever
// the Client asked for: the lock stays ours there long after our clock (the Client's short
// lease, which no answered renewal extends) lost it, however late the watchdog or the test
// runs on a loaded machine. The acquisition is answered with the ttl the Client asked for, so
// the Client's clock is not changed.
type appliedButFailed struct{ backend }

// appliedTTL is the lease appliedButFailed sets in Redis: far beyond any test's length.
const appliedTTL = time.Minute

func (b *appliedButFailed) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	asked := r.ttl
	r.ttl = appliedTTL
	res, err := b.backend.acquire(ctx, r)
	if res.pttl > asked {
		res.pttl = asked
	}
	return res, err
}

func (b *appliedButFailed) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	long := slices.Clone(rs)
	for i := range long {
		long[i].ttl = appliedTTL
	}
	if _, err := b.backend.renew(ctx, long); err != nil {
		return nil, err
	}
	return nil, unavailable("renew", errors.New("injected: reply lost"))
}

// lockedAsOurs fails the test unless Redis has key's lock as owner's: the lease was lost on
// our clock only. appliedButFailed keeps it ours in Redis for appliedTTL, so anything else is
// a finding, not a scenario missed.
func lockedAsOurs(ctx context.Context, t *testing.T, rdb *redis.Client, key, owner string) {
	t.Helper()
	lockKey := "lockguard:{" + key + "}:lock"
	o, err := rdb.HGet(ctx, lockKey, "o").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	if o != owner {
		pttl, _ := rdb.PTTL(ctx, lockKey).Result()
		t.Fatalf("lease lost on our clock, yet Redis no longer has the lock as ours (owner %q, "+
			"want %q, pttl %v): Redis kept it for %v from the last renewal", o, owner, pttl, appliedTTL)
	}
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
	lockedAsOurs(ctx, t, rdb, key, outer.l.owner)
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
	lockKey := "lockguard:{" + key + "}:lock"
	h, _ := rdb.HGet(ctx, lockKey, "h").Result()
	pttl, _ := rdb.PTTL(ctx, lockKey).Result()
	t.Fatalf("both holds of a lease lost on our clock (still ours in Redis) were released, yet "+
		"Redis keeps it (h=%s, pttl %v): another client gets %v", h, pttl, err)
}
