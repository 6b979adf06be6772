package dlock

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A watchdog batch given up at its deadline (a third of the lease) while still in flight (a
// go-redis client without ContextTimeoutEnabled lets the call go on) may yet reach Redis. A
// Refresh must not cross it: applied first, it would be cut short by the late batch, and the
// holder would count on the Refresh's lease while Redis lets the key go much sooner. The
// watchdog hands the lease back to Refresh only once its call is over, so the Refresh comes
// after the late batch and its lease stands.
func TestAbandonedWatchdogBatchDoesNotCutRefresh(t *testing.T) {
	srv := redistest.Start(t)
	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	plain := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := plain.ScriptLoad(ctx, luaRenew).Result(); err != nil { // one EVALSHA per renewal
		t.Fatal(err)
	}
	const lease = 1500 * time.Millisecond
	c := New(rdb, WithLease(lease))
	defer c.Close()

	var batches atomic.Int32
	firstStalled := make(chan struct{})
	n.stall = func(p []byte) time.Duration {
		// The watchdog's renewals (ttl 1500 ms), not the Refresh (ttl 10000 ms).
		if !bytes.Contains(p, []byte(scriptRenew.sha)) || !bytes.Contains(p, []byte("\r\n1500\r\n")) {
			return 0
		}
		if batches.Add(1) == 1 {
			close(firstStalled)
			// Sent at 500 ms, given up at 1 s (a third of the lease), lands at 1.2 s, while the
			// lock is still held.
			return 700 * time.Millisecond
		}
		return 4 * time.Second // later batches never land (past WriteTimeout)
	}

	key := t.Name()
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	<-firstStalled
	if err := lk.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	time.Sleep(600 * time.Millisecond) // the late batch has landed by now, whichever way
	lockKey := "lockguard:{" + key + "}:lock"
	pttl, _ := plain.PTTL(ctx, lockKey).Result()
	if pttl < 5*time.Second {
		t.Fatalf("600ms after a successful Refresh(10s) the lock has %v left in Redis (holder Err %v): "+
			"the watchdog's abandoned batch (PEXPIRE 1500 ms) landed after the Refresh", pttl, lk.Err())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
