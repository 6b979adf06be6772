package dlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisBackend keeps locks in Redis. Layout for lock key K under prefix P, with T the escaped K:
//
//	P:{T}:lock   hash    owner, fencing token, hold count and re-entry holds, last released
//	                     owner; kept without owner after a release until its lease would end
//	P:{T}:q      zset    waiters in arrival order
//	P:{T}:qd     zset    waiters' liveness deadlines
//	P:{T}:done   string  completion record
//	P:{T}:ch     channel hand-off notices (sharded pub/sub on a Cluster)
type redisBackend struct {
	rdb     redis.UniversalClient
	cluster bool
	oneNode bool // a *redis.Client: one server (or one master, behind Sentinel)
	prefix  string
	claim   time.Duration // lease of a handed-off lock until its new holder confirms it
	live    time.Duration // a queued waiter not heard of for this long leaves the line
	// replicas > 0: writes that grant a lock are followed by WAIT replicas replicaWait.
	replicas    int
	replicaWait time.Duration
	// Script arguments that are the same on every call, converted to interface values once
	// (converting an int64 or a string allocates): the claim and liveness leases in ms, the
	// publish command, and the Client's default lease in ms.
	claimArg, liveArg, pubArg, leaseArg any
	lease                               time.Duration
	// mineArg is the owner-id prefix of the Client's owners (see ownerIDs): a release that
	// hands the lock to one of them publishes nothing, and the waiter is told here.
	mineArg any

	ctxTimeouts bool          // the client ends calls at their context's deadline itself
	readTimeout time.Duration // the client's socket read timeout; <= 0: none
	subs        *subscriber

	mu      sync.Mutex
	closing bool
	calls   sync.WaitGroup // calls abandoned by their context, still finishing
	// answered is when a call last got an answer (unix ns), whatever the answer said.
	answered atomic.Int64
}

func newRedisBackend(rdb redis.UniversalClient, cfg *config) *redisBackend {
	_, cluster := rdb.(*redis.ClusterClient)
	_, oneNode := rdb.(*redis.Client)
	b := &redisBackend{
		rdb:     rdb,
		cluster: cluster,
		oneNode: oneNode,
		prefix:  cfg.prefix,
		claim:   3 * cfg.retry,
		live:    3 * cfg.retry,

		replicas:    cfg.replicas,
		replicaWait: cfg.replicaWait,
	}
	b.claimArg, b.liveArg, b.pubArg = ms(b.claim), ms(b.live), b.pubCmd()
	b.lease, b.leaseArg = cfg.lease, ms(cfg.lease)
	b.mineArg = cfg.ownerPrefix
	switch c := rdb.(type) {
	case *redis.Client:
		b.ctxTimeouts, b.readTimeout = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	case *redis.ClusterClient:
		b.ctxTimeouts, b.readTimeout = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	}
	b.subs = newSubscriber(rdb, cluster)
	b.subs.sendWait = cfg.retry // a waiter looks at least every retry interval (see live)
	return b
}

// close ends the pub/sub connections and waits for them and for the calls abandoned by their
// context, for at most releaseBound when the client's timeouts do not bound its calls (see
// closeWait): a Redis that does not answer them does not hold Close up.
func (b *redisBackend) close() error {
	expired, stop := closeWait(b.bounded())
	defer stop()
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.subs.closeUntil(expired)
	waitUntil(b.calls.Wait, expired)
	return nil
}

// call runs fn and returns when it is done or ctx ends, whichever comes first, so a wait
// respects its context even when the Redis client was built without ContextTimeoutEnabled
// (then a command blocks for up to ReadTimeout). fn is called directly, without a goroutine,
// when the call cannot outlive ctx by much: go-redis ends it at ctx's deadline itself
// (ContextTimeoutEnabled), ctx cannot end, or the client's ReadTimeout ends it before ctx's
// deadline would. A context cancelled without a deadline (a request whose client went away)
// then waits for the call in flight, which ends within the client's timeouts. Otherwise fn
// runs in a goroutine; an abandoned call finishes in the background and close waits for it.
// After close, nothing may outlive it: fn is called directly, unless the client has no
// timeouts to end it (ReadTimeout -1). It then runs in a goroutine that nobody waits for
// (close stops waiting for Redis after a while anyway), so that a call Redis does not answer
// (a clean-up at Close, a release after it) still returns when its context ends.
// A goroutine per call costs tens of microseconds on a small machine, where a Redis round
// trip costs about a hundred.
func (b *redisBackend) call(ctx context.Context, fn func(context.Context) error) error {
	if !b.mayOutlive(ctx) {
		return b.noteAnswer(fn(ctx))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	closing := b.closing
	if closing && b.bounded() {
		b.mu.Unlock()
		return fn(ctx) // within the client's timeouts
	}
	if !closing {
		b.calls.Add(1)
	}
	b.mu.Unlock()
	var err error
	finished := make(chan struct{})
	go func() {
		if !closing {
			defer b.calls.Done()
		}
		defer close(finished)
		err = b.noteAnswer(fn(ctx))
	}()
	select {
	case <-finished:
		return err
	case <-ctx.Done():
		return &inFlightError{err: ctx.Err(), finished: finished}
	}
}

// migrationWait bounds how long callThroughMigration waits for a slot migration to end.
const migrationWait = 5 * time.Second

// callThroughMigration is call, run again while a slot migration refuses it (see
// migrating), for at most migrationWait and while ctx lasts. A Cluster answers TRYAGAIN to a
// script while the slot of its keys is being migrated to another node, because the script
// names keys that are absent (the line, the record); the script did not run, so running it
// again is safe. go-redis's own retries end within a fraction of a second, well before a
// migration of any size does. A release or a hand-back that gave up there would leave the
// lock held, and its line blocked, until the lease ends; a waiting acquisition is willing to
// wait anyway. TryAcquire does not wait: it fails with ErrUnavailable.
func (b *redisBackend) callThroughMigration(ctx context.Context, fn func(context.Context) error) error {
	var start time.Time // of the first refusal: the common call is not refused
	delay := 10 * time.Millisecond
	for {
		err := b.call(ctx, fn)
		if !migrating(err) {
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start)+delay > migrationWait {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// callFor is callThroughMigration for a call that may wait (Acquire), call otherwise
// (TryAcquire).
func (b *redisBackend) callFor(wait bool) func(context.Context, func(context.Context) error) error {
	if wait {
		return b.callThroughMigration
	}
	return b.call
}

// migrating reports whether err is a refusal that a slot migration gives while it lasts:
// TRYAGAIN, or a MOVED or ASK redirection left over when go-redis's own redirections ran
// out (the nodes disagree about the slot until every one has been told where it went). The
// script did not run.
func migrating(err error) bool {
	if err == nil {
		return false
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsTryAgainError(err)
}

// noteAnswer records when the store answered a call that returned err: with a reply, a Redis
// error reply or redis.Nil, but not a network or context error. It returns err.
func (b *redisBackend) noteAnswer(err error) error {
	if err == nil || isReply(err) {
		b.answered.Store(time.Now().UnixNano())
	}
	return err
}

// isReply reports whether err is an error reply from Redis (redis.Nil included). Its target
// lives here, so a call without an error does not move one to the heap.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// answeredSince answers for a single server only: on a Cluster (or any client of several
// nodes) an answer from one node says nothing of the node that holds a silent look's key, so
// the probe alone decides.
func (b *redisBackend) answeredSince(t time.Time) bool {
	return b.oneNode && b.answered.Load() > t.UnixNano()
}

// mayOutlive reports whether a call with ctx could go on well past ctx's end.
func (b *redisBackend) mayOutlive(ctx context.Context) bool {
	if b.ctxTimeouts || ctx.Done() == nil {
		return false
	}
	if !b.bounded() {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < b.readTimeout
}

// bounded reports whether every call ends within the client's timeouts, whatever its context.
func (b *redisBackend) bounded() bool { return b.readTimeout > 0 }
