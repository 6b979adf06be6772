package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client acquires locks. It owns two kinds of background work, started on demand: one
// watchdog loop that renews all its held locks in batches, and one shared pub/sub connection
// for waiters. Close stops both. A Client is safe for concurrent use; make one per Redis
// deployment and share it.
type Client struct {
	be     backend
	cfg    config
	ids    ownerIDs
	wd     *watchdog
	tel    *telemetry
	log    *slog.Logger
	closed atomic.Bool
	// closing is closed by Close: waits in progress end with ErrClosed.
	closing chan struct{}
	mu      sync.Mutex     // orders beginWait, hold and untilClose against Close
	waits   sync.WaitGroup // waits in progress, which leave the line before Close goes on
	// ends holds the cancellations of the acquisitions in progress that Close ends (see
	// untilClose). Guarded by mu.
	ends map[*context.CancelCauseFunc]struct{}
	// leaveRetries counts the leaves being tried again (see leaveLine), at most
	// maxLeaveRetries.
	leaveRetries atomic.Int64
}

// New returns a Client that keeps its locks in rdb: a *redis.Client, a *redis.ClusterClient
// (keys of one lock share a hash tag; waiters use sharded pub/sub) or a failover client. It does
// not take ownership of rdb. See docs/dlock.md for the rdb settings that matter
// (ContextTimeoutEnabled, ReadTimeout, ClusterStateReloadInterval). It panics if rdb is nil
// or a *redis.Ring, programming errors found at start-up rather than at the first Acquire: a
// Ring spreads keys over servers that know nothing of each other, so a lock's renewal, which
// covers many locks in one call, and its waiters' channel would reach the wrong server. It
// panics too with WithReplicaAck on a client of another type (a wrapper of its own): the
// replicas are counted on the master a *redis.Client or *redis.ClusterClient names, and
// without one every acquisition would fail as ErrUnavailable.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	if v := reflect.ValueOf(rdb); rdb == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		panic("dlock: New with a nil Redis client")
	}
	if _, ok := rdb.(*redis.Ring); ok {
		panic("dlock: New with a *redis.Ring, which is not supported: use a *redis.Client, a failover client or a *redis.ClusterClient")
	}
	cfg := config{lease: DefaultLease, retry: DefaultRetryInterval, prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.replicas > 0 {
		switch rdb.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			panic(fmt.Sprintf("dlock: WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", rdb))
		}
	}
	ids := newOwnerIDs()
	cfg.ownerPrefix = ids.prefix
	c := &Client{cfg: cfg, ids: ids, log: cfg.logger, closing: make(chan struct{})}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.be = newRedisBackend(rdb, &cfg)
	c.tel = newTelemetry(&cfg)
	c.wd = newWatchdog(c)
	return c
}

// Close stops the watchdog and the pub/sub connection and waits for them. Waits in progress
// end with ErrClosed, having left the line (Close waits for that, within the Redis client's
// timeouts), and a lock an acquisition obtains as Close runs is freed in Redis and answered
// with ErrClosed. Locks the watchdog renews are no longer renewed: their Done closes with
// ErrLockLost and they expire in Redis at the end of their lease. A lock taken WithTTL is not
// renewed anyway: it keeps its lease, and its Done closes when that ends (one handed over by
// a release and not yet confirmed to its ttl is ended like a renewed one). An acquisition
// whose call fails as Close runs is taken out of line all the same, by a goroutine Close does
// not wait for. Release locks before closing. Close does not close the Redis client.
//
// When the Redis client's timeouts do not bound its calls (go-redis ReadTimeout -1), a Redis
// that stops answering holds Close up for at most 10 s: it waits at most 5 s for the waits
// in progress, the pub/sub connection and the calls their contexts gave up, then at most 5 s
// for the clean-ups (a waiter leaving the line), the renewals in flight and the answers of
// Refresh calls given up by their context. What still waits for
// Redis then goes on in the background until Redis answers, or its context (a clean-up's:
// 5 s) ends: a waiter that could not leave the line is dropped from it by Redis three retry
// intervals after its last look. An acquisition whose call is unanswered (a look, a
// re-entry) returns ErrClosed at Close whatever its context; its clean-up, in the
// background, takes out a lock that call may still take once Redis answers, or the lock
// ends with its lease.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed.Swap(true) {
		c.mu.Unlock()
		return nil
	}
	ends := c.ends
	c.ends = nil
	c.mu.Unlock()
	close(c.closing)
	for end := range ends {
		(*end)(ErrClosed)
	}
	// The store ends its listens first, so every wait in progress sees Close. Each then
	// takes its place out of line, in the background, which the watchdog's close waits for:
	// a release would otherwise hand the lock to one of them, and the key would stay
	// blocked for the claim lease. (Store calls made after the store's close are not waited
	// for there: they end within the store client's timeouts or, without any, with their
	// context.) The store bounds its own wait as the waits' is bounded here (see closeWait).
	expired, stop := closeWait(c.be.bounded())
	defer stop()
	err := c.be.close()
	waitUntil(c.waits.Wait, expired)
	// A bound of its own, so that it ends the locks the watchdog renews however long the
	// waits above took, and the clean-ups of waits that ended only now get their time.
	expired, stop = closeWait(c.be.bounded())
	defer stop()
	waitUntil(c.wd.close, expired)
	return err
}

// closeWait returns a channel closed when Close has waited releaseBound for Redis, when the
// store client's own timeouts do not bound its calls; a nil channel (no bound) otherwise, as
// every call then ends within those timeouts.
func closeWait(bounded bool) (<-chan struct{}, context.CancelFunc) {
	if bounded {
		return nil, func() {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseBound)
	return ctx.Done(), cancel
}

// waitUntil calls wait and returns when it returns, or once expired is closed (nil: never).
// A wait cut short goes on in a goroutine of its own, which ends with it: what it waits for
// is waiting for Redis.
func waitUntil(wait func(), expired <-chan struct{}) {
	if expired == nil {
		wait()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait()
	}()
	select {
	case <-done:
	case <-expired:
	}
}

// untilClose returns ctx for the calls of an acquisition, ended (cause ErrClosed) when Close
// begins if the store client's timeouts do not bound its calls (go-redis ReadTimeout -1): a
// look that Redis does not answer then ends at Close, not when Redis answers or ctx ends,
// which may be never. done must be called when the acquisition is over. With a bounded
// client, ctx is returned as it is: every call ends within the client's timeouts.
func (c *Client) untilClose(ctx context.Context) (_ context.Context, done func()) {
	if c.be.bounded() {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	end := &cancel
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		cancel(ErrClosed)
		return ctx, func() {}
	}
	if c.ends == nil {
		c.ends = map[*context.CancelCauseFunc]struct{}{}
	}
	c.ends[end] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.ends, end)
		c.mu.Unlock()
		cancel(nil)
	}
}

// closedErr is err, or ErrClosed when err is ctx's end and Close ended ctx (see untilClose).
func closedErr(ctx context.Context, err error) error {
	if err != nil && errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), ErrClosed) {
		return ErrClosed
	}
	return err
}

// beginWait registers a wait that Close lets leave the line before it goes on; it reports
// false once Close has begun.
func (c *Client) beginWait() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.waits.Add(1)
	return true
}

// Acquire blocks until it holds the lock for key, or ctx ends. Waiters are served in arrival
// order and woken by a message when the lock is released to them. If ctx carries a live lock
// of key from this Client (see WithLock), Acquire re-enters it instead.
//
// Errors: ErrInvalidKey; an error matching both ErrNotObtained and ctx.Err() when ctx ended
// first (at once, with nothing sent, when it had ended before the call); ErrUnavailable
// wrapping Redis errors, also (with ctx.Err()) when ctx ended while Redis did not answer;
// *CompletedError with SkipCompleted; ErrClosed.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	mustContext(ctx, "Acquire")
	return c.acquire(ctx, key, true, opts)
}

// TryAcquire takes the lock for key if it is free and nobody is queued for it, and never waits.
// A busy lock gives ErrNotObtained; other errors are those of Acquire, and ErrUnavailable for
// a lock answered only after its lease had run out on this client's clock (Redis stalled
// past it): it is freed again, where Acquire looks again. Re-entry works as with Acquire.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	mustContext(ctx, "TryAcquire")
	return c.acquire(ctx, key, false, opts)
}

// Do runs fn while holding the lock for key: it acquires (waiting as Acquire does), calls fn
// with a context that carries the lock and is cancelled if the lock is lost (and, with cause
// ErrNotHeld, when Do returns), and releases, also when fn panics (the panic is then
// re-raised). It returns fn's error, else the error of
// the release (matching ErrLockLost if the lock was lost while fn ran). When fn failed and the
// lock was lost too (fn typically returns its context's error once the loss cancels it), the
// error matches both fn's error and ErrLockLost, so the loss is never hidden behind
// context.Canceled. fn may end the hold itself, with Complete (or Release) on the lock
// FromContext gives it: that is no error. Do panics if fn is nil, before taking the lock.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	if fn == nil {
		panic("dlock: Do with a nil fn")
	}
	mustContext(ctx, "Do")
	lk, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	defer func() {
		p := recover()
		rctx, cancel := c.releaseContext(ctx)
		rerr := lk.Release(rctx)
		cancel()
		if p != nil {
			panic(p)
		}
		switch {
		case err != nil && errors.Is(rerr, ErrLockLost):
			err = fmt.Errorf("%w (%w)", err, rerr)
		case err == nil && !(errors.Is(rerr, ErrNotHeld) && !errors.Is(rerr, ErrLockLost)):
			err = rerr // ErrNotHeld alone: fn released the hold itself (Complete, Release)
		}
	}()
	return fn(WithLock(ctx, lk))
}

// Completed returns the record stored by Complete for key, if it is still retained. Errors:
// ErrInvalidKey (as Acquire), ErrUnavailable (Redis did not answer), ErrClosed after Close.
func (c *Client) Completed(ctx context.Context, key string) (record []byte, ok bool, err error) {
	mustContext(ctx, "Completed")
	if c.closed.Load() {
		return nil, false, ErrClosed
	}
	if err := validKey(key); err != nil {
		return nil, false, err
	}
	return c.be.record(ctx, key)
}

// releaseBound bounds a release or clean-up that must happen even though the caller's context
// may have ended, and each of Close's waits for Redis (see closeWait), when the store client's
// own timeouts do not bound them.
const releaseBound = 5 * time.Second

// releaseContext is ctx without its cancellation, for a release that must happen even though
// ctx may have ended, bounded as boundedContext bounds it.
func (c *Client) releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.boundedContext(context.WithoutCancel(ctx))
}

// sendContext is the context a release is sent with: ctx, bounded as boundedContext bounds
// it, or, when ctx had ended before the call, ctx without its cancellation (releaseContext):
// a release asked for with an ended context (defer lock.Release(ctx) after the request's
// context ended) still frees the key, rather than leave it locked to the end of its lease.
func (c *Client) sendContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil {
		return c.releaseContext(ctx)
	}
	return c.boundedContext(ctx)
}

// boundedContext gives a context that cannot end a deadline releaseBound away when the store
// client's own timeouts do not bound its calls (go-redis ReadTimeout -1); any other context is
// returned as it is.
func (c *Client) boundedContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil || c.be.bounded() {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, releaseBound)
}
