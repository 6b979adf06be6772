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
// covers many locks in one call, and its waiters' channel would reach the wrong server.
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
// A busy lock gives ErrNotObtained; other errors are those of Acquire. Re-entry works as with
// Acquire.
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

// Completed returns the record stored by Complete for key, if it is still retained. After
// Close it returns ErrClosed.
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

// confirmHandOff extends a handed-off lock to its full lease (and waits for the replicas, with
// WithReplicaAck) before the waiter may use it; a lock that cannot be confirmed is passed on.
// Without WithReplicaAck it is only called when the claim lease is nearly spent on our clock
// (see grant.confirmDue); otherwise the watchdog renews the lock a third into the claim lease.
func (c *Client) confirmHandOff(ctx context.Context, r acquireRequest, g *grant) error {
	sent := time.Now()
	ok, err := c.be.confirm(ctx, r.key, r.owner, r.ttl)
	if err == nil && !ok {
		err = lost("hand-off expired before it was confirmed")
	}
	if err != nil {
		start := time.Now()
		left := c.cleanup(ctx, r, err)
		if !errors.Is(err, ErrLockLost) { // Redis answered a lost one: the store is not at fault
			err = c.lookErr(ctx, r.key, err, sent) // the caller's deadline, if that is what ended it
		}
		c.awaitLeave(left, start)
		return err
	}
	g.sent, g.valid, g.confirmed = sent, r.ttl, true
	return nil
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

func validKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// acquireOptions applies opts to a new acquireConfig. Without options nothing is allocated:
// the config the options write through escapes to the heap.
func acquireOptions(opts []AcquireOption) acquireConfig {
	if len(opts) == 0 {
		return acquireConfig{}
	}
	ac := new(acquireConfig)
	for _, o := range opts {
		if o != nil {
			o.applyAcquire(ac)
		}
	}
	return *ac
}

func (c *Client) acquire(ctx context.Context, key string, wait bool, opts []AcquireOption) (*Lock, error) {
	// Every call is traced and counted, a refused one and a re-entry too: either can fail.
	ctx, span := c.tel.startAcquire(ctx, key, wait)
	refused := validKey(key)
	if c.closed.Load() {
		refused = ErrClosed
	}
	if refused != nil {
		c.tel.endAcquire(ctx, span, grant{}, refused)
		return nil, refused
	}
	ac := acquireOptions(opts)
	calls, done := c.untilClose(ctx)
	defer done()
	if outer := heldIn(ctx, c, key); outer != nil {
		lk, err := outer.reenter(calls, ac.skipCompleted)
		// A hold released as the call came: a context of the lock (WithLock) ends with that
		// release, so the call answers as it will once the release returns. One that cannot
		// end (context.WithoutCancel of it, for work that outlives the hold) takes the lock
		// afresh, as the same call a moment later does.
		if err != errHoldReleased || ctx.Done() != nil {
			if err == errHoldReleased {
				err = &waitError{ctxErr: context.Canceled}
			}
			span.reentry()
			err = closedErr(calls, err)
			c.tel.endAcquire(ctx, span, grant{attempts: 1}, err)
			return lk, err
		}
	}
	if err := ctx.Err(); err != nil {
		// Ended before the first look: not obtained, as a wait that ran out, and nothing was
		// sent, so there is no look to take back (see cleanup).
		err = &waitError{ctxErr: err}
		c.tel.endAcquire(ctx, span, grant{}, err)
		return nil, err
	}
	r := acquireRequest{key: key, ttl: ac.ttl, wait: wait, skipCompleted: ac.skipCompleted}
	if r.ttl == 0 {
		r.ttl = c.cfg.lease
	}
	tctx := ctx // the caller's, for the telemetry
	ctx = calls
	look := ctx // the context of the first look at the lock
	if wait && ac.maxWait > 0 {
		start := time.Now()
		var cancelWait, cancelLook context.CancelFunc
		// The first look includes the WAIT for the replicas with WithReplicaAck (twice when
		// the node had not loaded the script: see runAcked): a store that does not
		// acknowledge in time is then ErrUnavailable, as without a max wait.
		firstLook := FirstLook
		if c.cfg.replicas > 0 {
			firstLook += 2 * c.cfg.replicaWait
		}
		look, cancelLook = context.WithDeadline(ctx, start.Add(max(ac.maxWait, firstLook)))
		defer cancelLook()
		ctx, cancelWait = context.WithDeadline(ctx, start.Add(ac.maxWait))
		defer cancelWait()
	}
	var g grant
	var err error
	for {
		r.owner = c.ids.next()
		g, err = c.obtain(ctx, look, r)
		if err == nil && g.handedOff && (c.cfg.replicas > 0 || g.confirmDue()) {
			err = c.confirmHandOff(ctx, r, &g)
			if errors.Is(err, ErrLockLost) {
				// The hand-off ran out before we could confirm it (we were paused past the
				// claim lease) and went on to the next in line: wait again, as a new waiter,
				// while the old owner id is taken out of line. A wait whose context ended
				// meanwhile ran out on a busy lock (TestExpiredHandOffWithEndedContextIsNotObtained).
				if ctx.Err() == nil {
					continue
				}
				err = &waitError{ctxErr: ctx.Err()}
			}
		}
		break
	}
	var l *lease
	if err == nil {
		l = newLease(c, key, r.owner, g.token, r.ttl, ac.ttl == 0)
		l.names = g.names
		// A handed-off lease holds the releaser's claim lease (min(ttl, claim)) until
		// confirmed. A WithTTL lease that got its whole ttl needs no confirmation; one that
		// got less is confirmed to what is left of ttl from now.
		l.confirm = g.handedOff && !g.confirmed && (l.auto || g.valid < r.ttl)
		if l.confirm && !l.auto {
			l.fixedEnd = time.Now().Add(r.ttl)
		}
		l.start(g.sent, g.valid)
		c.tel.started(l)
		if !c.hold(l) {
			// Obtained as Close ran: no watchdog will renew it and nobody can use it. Free it
			// in Redis rather than leave it held to the end of its lease.
			l.end(ErrClosed)
			rctx, cancel := c.boundedContext(context.WithoutCancel(ctx))
			_, _ = c.be.release(rctx, releaseRequest{key: key, owner: r.owner, entry: "1", names: g.names})
			cancel()
			err = ErrClosed
		}
	}
	err = closedErr(calls, err)
	c.tel.endAcquire(tctx, span, g, err)
	if err != nil {
		return nil, err
	}
	return &Lock{l: l, entry: "1"}, nil
}

// hold hands a lease just obtained to the watchdog, when it is renewed or awaits
// confirmation; it reports false once Close has begun. Checking and adding under c.mu, which
// Close takes to begin, means a lease is either watched before Close stops the watchdog (and
// ended by it, as every lock held at Close) or not handed out at all.
func (c *Client) hold(l *lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	if l.auto || l.confirm {
		c.wd.add(l)
	}
	return true
}
