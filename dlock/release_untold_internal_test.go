package dlock

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A Release whose caller's context ends while its script is still on its way (go-redis
// without ContextTimeoutEnabled: the call runs on, in the background) returns ErrUnavailable,
// but the script runs all the same and hands the lock to a waiter of the same Client. No
// message is published for such a waiter (it is "ours"), and the reply that names it is
// dropped with the abandoned call: every waiter of the Client is told to look again once the
// call is over. Before, only a failed script call told them, and the waiter held the lock in
// Redis without knowing it until its next look (here the retry interval, 10 s).
func TestAbandonedReleaseTellsOwnWaiter(t *testing.T) {
	srv := redistest.Start(t)
	var stallRelease, acquireLooks atomic.Int64
	releaseSHA := []byte(scriptRelease.sha)
	acquireSHA := []byte(scriptAcquire.sha)
	tn := &testNet{stall: func(p []byte) time.Duration {
		if bytes.Contains(p, acquireSHA) {
			acquireLooks.Add(1)
		}
		if bytes.Contains(p, releaseSHA) && stallRelease.CompareAndSwap(1, 0) {
			return time.Second // the bytes go out a second late; the caller gave up at 100 ms
		}
		return 0
	}}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = tn.dial })
	c := New(rdb, WithRetryInterval(10*time.Second), WithLease(60*time.Second))
	defer func() { _ = c.Close() }()
	admin := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	key := t.Name()
	keys, ch := c.be.(*redisBackend).keys(key)

	// Load the scripts (a server that has them answers EVALSHA; production servers do).
	warm, err := c.Acquire(ctx, key+"-warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *Lock
		err error
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	got := make(chan result, 1)
	looksBefore := acquireLooks.Load()
	go func() {
		l, err := c.Acquire(wctx, key)
		got <- result{l, err}
	}()
	// The waiter is queued, subscribed, and has made its look after the subscription.
	if !waitFor(10*time.Second, func() bool {
		n, _ := admin.ZCard(ctx, keys[1]).Result()
		subs, _ := admin.PubSubNumSub(ctx, ch).Result()
		return n == 1 && subs[ch] == 1 && acquireLooks.Load()-looksBefore >= 2
	}) {
		t.Fatal("the waiter did not queue and subscribe")
	}

	stallRelease.Store(1)
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	rerr := lk.Release(rctx)
	rcancel()
	t.Logf("Release: %v", rerr)

	// The script ran after all: the lock is the waiter's in Redis.
	if !waitFor(5*time.Second, func() bool {
		o, _ := admin.HGet(ctx, keys[0], "o").Result()
		return o != "" && o != lk.l.owner && strings.HasPrefix(o, c.ids.prefix)
	}) {
		o, _ := admin.HGet(ctx, keys[0], "o").Result()
		t.Fatalf("the release script never handed the lock on (owner %q)", o)
	}
	handed := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		_ = r.lk.Release(ctx)
	case <-time.After(3 * time.Second):
		o, _ := admin.HGet(ctx, keys[0], "o").Result()
		pttl, _ := admin.PTTL(ctx, keys[0]).Result()
		wcancel()
		r := <-got
		t.Fatalf("the lock was handed to this Client's waiter (owner %s, pttl %v) but the waiter was never told: "+
			"still waiting %v later (Release returned %v); its Acquire ended with %v after %v",
			o, pttl, 3*time.Second, rerr, r.err, time.Since(handed))
	}
}
