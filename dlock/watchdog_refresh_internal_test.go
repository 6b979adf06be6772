package dlock

import (
	"bytes"
	"context"
	"fmt"
	"sync"
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
//
// The case needs the Refresh asked for, and the batch given up, before the batch reaches
// Redis (700 ms after it was sent): a machine that stalls past that makes the Refresh come
// after the batch anyway. Each attempt says whether it was so; one that was not is run again
// (a new Client, a new key), and the test fails when none was.
func TestAbandonedWatchdogBatchDoesNotCutRefresh(t *testing.T) {
	srv := redistest.Start(t)
	plain := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := plain.ScriptLoad(ctx, luaRenew).Result(); err != nil { // one EVALSHA per renewal
		t.Fatal(err)
	}
	const attempts = 5
	for attempt := 1; attempt <= attempts; attempt++ {
		reached, why := abandonedBatchThenRefresh(t, ctx, srv, plain, fmt.Sprintf("%s-%d", t.Name(), attempt))
		if reached {
			return
		}
		t.Logf("attempt %d: %s: the case was not reached", attempt, why)
	}
	t.Fatalf("in %d attempts, the watchdog's batch never reached Redis after it was given up and a Refresh "+
		"was asked for: a Refresh waiting on a batch still in flight was never tested", attempts)
}

// abandonedBatchThenRefresh runs one attempt of TestAbandonedWatchdogBatchDoesNotCutRefresh on
// key with a new Client of srv (plain: a client of srv not held back), failing the test when
// the Refresh's lease does not stand. It reports whether the case was reached: the watchdog's
// first batch was given up (its context ended) and the Refresh asked for before the batch was
// written to Redis; and the batch was answered. Otherwise it says why not.
func abandonedBatchThenRefresh(t *testing.T, ctx context.Context, srv *redistest.Server, plain *redis.Client, key string) (bool, string) {
	t.Helper()
	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	batch := &firstRenewBatch{answered: make(chan struct{})}
	rdb.AddHook(batch)
	const lease = 1500 * time.Millisecond
	c := New(rdb, WithLease(lease))
	defer c.Close()

	var batches atomic.Int32
	var refreshAsked, refreshFirst, givenUp atomic.Bool
	firstStalled := make(chan struct{})
	n.stall = func(p []byte) time.Duration {
		// The watchdog's renewals (ttl 1500 ms), not the Refresh (ttl 10000 ms).
		if !bytes.Contains(p, []byte(scriptRenew.sha)) || !bytes.Contains(p, []byte("\r\n1500\r\n")) {
			return 0
		}
		if batches.Add(1) == 1 {
			close(firstStalled)
			// Sent at 500 ms, given up at 1 s (a third of the lease), lands at 1.2 s, while the
			// lock is still held. What was so as it is written to Redis now tells the case.
			time.Sleep(700 * time.Millisecond)
			givenUp.Store(batch.givenUp())
			refreshFirst.Store(refreshAsked.Load())
			return 0
		}
		return 4 * time.Second // later batches never land (past WriteTimeout)
	}

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	<-firstStalled
	// The Refresh's context says when the Refresh began: it asks for its Done at once.
	rctx := &doneCalled{Context: ctx, first: func() { refreshAsked.Store(true) }}
	if err := lk.Refresh(rctx, 10*time.Second); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	// The late batch has landed once it is answered (go-redis reads its reply whatever
	// became of the call that sent it).
	select {
	case <-batch.answered:
	case <-ctx.Done():
		t.Fatal("the watchdog's first batch was never answered")
	}
	lockKey := "lockguard:{" + key + "}:lock"
	pttl, _ := plain.PTTL(ctx, lockKey).Result()
	if pttl < 5*time.Second {
		t.Fatalf("after a successful Refresh(10s) and the late batch's answer, the lock has %v left in Redis (holder Err %v): "+
			"the watchdog's abandoned batch (PEXPIRE 1500 ms) landed after the Refresh", pttl, lk.Err())
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	switch {
	case batch.err != nil:
		return false, fmt.Sprintf("the watchdog's first batch failed (%v)", batch.err)
	case !givenUp.Load():
		return false, "the watchdog's first batch reached Redis before it was given up"
	case !refreshFirst.Load():
		return false, "the watchdog's first batch reached Redis before the Refresh was asked for"
	}
	return true, ""
}

// firstRenewBatch is a go-redis hook on the watchdog's first batch (the first pipeline with a
// renewal to 1500 ms): the context it was sent with and, once answered is closed, its error.
type firstRenewBatch struct {
	mu       sync.Mutex
	ctx      context.Context // nil until the batch is on its way
	answered chan struct{}
	err      error // set before answered is closed
}

func (h *firstRenewBatch) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *firstRenewBatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *firstRenewBatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		first := h.ctx == nil && renewsTo1500(cmds)
		if first {
			h.ctx = ctx
		}
		h.mu.Unlock()
		err := next(ctx, cmds)
		if first {
			h.err = err
			for _, cmd := range cmds {
				if h.err == nil {
					h.err = cmd.Err()
				}
			}
			close(h.answered)
		}
		return err
	}
}

// givenUp reports whether the batch's context has ended: its call was given up.
func (h *firstRenewBatch) givenUp() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ctx != nil && h.ctx.Err() != nil
}

// renewsTo1500 reports whether cmds hold a renewal (EVALSHA of the renew script) to 1500 ms.
func renewsTo1500(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		args := cmd.Args()
		if len(args) > 2 && fmt.Sprint(args[1]) == scriptRenew.sha && fmt.Sprint(args[len(args)-1]) == "1500" {
			return true
		}
	}
	return false
}

// doneCalled is a context that calls first the first time its Done is asked for.
type doneCalled struct {
	context.Context
	once  sync.Once
	first func()
}

func (c *doneCalled) Done() <-chan struct{} {
	c.once.Do(c.first)
	return c.Context.Done()
}
