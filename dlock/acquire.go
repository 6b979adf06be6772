package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// validKey refuses a key no call takes: empty, or longer than MaxKeyLen.
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

// acquire is Acquire (wait) and TryAcquire: checks, re-entry, the look or wait (obtain), and
// the lease of a lock obtained handed to the watchdog.
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
		lk, err := outer.reenter(calls, ac.skipCompleted, wait)
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
		if err == nil && !time.Now().Before(g.deadline()) {
			// Answered after the lease had run out on our clock (Redis stalled past it while
			// the look was on its way): a lock over before it is handed out is of no use, and
			// Redis holds it for nobody until its lease ends. Free it (passing it on to the
			// next in line), then wait on as a new waiter, or tell a TryAcquire the store was
			// too slow (TestAcquireAnsweredPastItsLease).
			c.freeUnused(ctx, r.key, r.owner, g.names)
			switch {
			case wait && ctx.Err() == nil:
				continue
			case wait:
				err = &waitError{ctxErr: ctx.Err()}
			default:
				err = unavailable("acquire", errAnsweredLate)
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
			c.freeUnused(ctx, key, r.owner, g.names)
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

// errAnsweredLate is the cause of a TryAcquire whose answer came after the lease it granted
// had run out on the caller's clock.
var errAnsweredLate = errors.New("answered after the lease it granted had run out on this client's clock")

// freeUnused releases in Redis a lock just obtained that will not be handed to the caller,
// within the client's bound, whether or not ctx has ended.
func (c *Client) freeUnused(ctx context.Context, key, owner string, names any) {
	rctx, cancel := c.boundedContext(context.WithoutCancel(ctx))
	defer cancel()
	_, _ = c.be.release(rctx, releaseRequest{key: key, owner: owner, entry: "1", names: names})
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

// confirmHandOff extends a handed-off lock to its full lease (and waits for the replicas, with
// WithReplicaAck) before the waiter may use it; a lock that cannot be confirmed is passed on.
// Without WithReplicaAck it is only called when the claim lease is nearly spent on our clock
// (see grant.confirmDue); otherwise the watchdog renews the lock a third into the claim lease.
func (c *Client) confirmHandOff(ctx context.Context, r acquireRequest, g *grant) error {
	sent := time.Now()
	ok, err := c.be.confirm(ctx, r.key, r.owner, r.ttl)
	if err == nil && !ok {
		err = lost(EndTaken, "hand-off expired before it was confirmed")
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
