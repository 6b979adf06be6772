package dlock

import (
	"context"
	"time"
)

// dropHold removes one hold entry that a failed call (failing with failure) may have added,
// without waiting for it; a call still in flight is let finish first. The release script only
// deletes that entry (it is not the last hold: the outer one remains).
// If that was the last hold in Redis (the others were released meanwhile), the lock is free
// and the lease ends.
//
// The call that failed usually failed because Redis did: the removal is tried again (see
// retryCleanup) while the lease lasts. A hold left in Redis would keep the key locked after
// the release of every hold the caller knows of, until the lease ran out.
func (c *Client) dropHold(ctx context.Context, l *lease, entry string, failure error) {
	c.wd.background(func() {
		afterInFlight(failure)
		err := c.retryCleanup(ctx, l.ttl, l.done(), nil, func(ctx context.Context) error {
			res, err := c.be.release(ctx, releaseRequest{key: l.key, owner: l.owner, entry: entry, names: l.names})
			if err == nil && res.owned && res.left == 0 {
				l.end(ErrNotHeld)
			}
			return err
		})
		if err != nil {
			c.log.Warn("dlock: removing a hold after a failed call failed; it goes with the lock",
				"key_hash", KeyHash(l.key), "err", err)
		}
	})
}

// retryCleanup runs fn, a clean-up that must reach Redis although the caller's context may
// have ended, until it succeeds: again and again, less and less often (from dropRetry up to a
// third of ttl, the lease at stake), until stop is closed or the Client closes. failed is the
// error of an attempt the caller made already (nil: none), after which the first pause comes
// before the first run. It returns fn's last error when it gave up.
func (c *Client) retryCleanup(ctx context.Context, ttl time.Duration, stop <-chan struct{}, failed error, fn func(context.Context) error) error {
	delay, err := dropRetry, failed
	for {
		if err != nil {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-stop:
			case <-c.closing:
			}
			t.Stop()
			if isClosed(stop) || c.closed.Load() {
				return err
			}
			delay = min(2*delay, max(ttl/3, dropRetry))
		}
		cctx, cancel := c.releaseContext(ctx)
		err = fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
	}
}

// dropRetry is the first pause before dropHold tries again.
const dropRetry = 20 * time.Millisecond

// cleanup takes an owner out of line and passes on a lock handed to it, in the background:
// ctx may have ended already. When the call that failed with failure is still in flight, the
// clean-up comes after it. The returned channel is closed when the clean-up is over. Close
// waits for it: the clean-ups of waits in progress when Close began are started before
// Close stops taking background work. A look that failed after that (a TryAcquire in flight
// as Close ran) may still have taken the lock: it is left all the same, once, by a goroutine
// of its own that Close does not wait for, which ends within the bounds of the call in
// flight and of the leave (see releaseBound).
func (c *Client) cleanup(ctx context.Context, r acquireRequest, failure error) <-chan struct{} {
	done := make(chan struct{})
	leave := func() {
		defer close(done)
		c.leaveLine(ctx, r, failure)
	}
	if !c.wd.background(leave) {
		go leave()
	}
	return done
}

// leaveWait bounds how long an acquisition whose wait ended waits for its place in line to be
// given up before it returns. Redis answers in well under a millisecond; one that does not
// answer in time must not hold up a caller whose context has ended.
const leaveWait = storeSilence

// awaitLeave waits for the clean-up of a wait that is over (done, from cleanup), so that the
// waiter is out of line (and a lock handed to it passed on) when Acquire returns: whatever
// the caller does next, such as a TryAcquire after the holder's release, does not find the
// lock handed to a waiter that has gone. It waits leaveWait at most from started; the
// clean-up then goes on in the background. The wait's error is worked out meanwhile, so a
// store that does not answer costs the caller the longer of the two, not their sum.
func (c *Client) awaitLeave(done <-chan struct{}, started time.Time) {
	t := time.NewTimer(leaveWait - time.Since(started))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// leaveLine takes r's owner out of line and passes on a lock handed to it, after the call
// that failed with failure, if that is still in flight.
//
// A failed call (failure != nil) may have taken the lock, its reply lost. When the leave fails
// too, it is tried again (see retryCleanup) until Redis answers, for as long as such a lock
// would be held, so that it does not stay held, with nobody to renew or release it, until its
// lease runs out. At most maxLeaveRetries leaves are tried again at once: an outage fails
// every acquisition at once, and each tried again holds a goroutine for up to its lease. A
// wait that ended without a failed call leaves once: its place expires by itself, and a lock
// handed to it meanwhile holds only the short claim lease.
func (c *Client) leaveLine(ctx context.Context, r acquireRequest, failure error) {
	afterInFlight(failure)
	var h handOff
	leave := func(ctx context.Context) (err error) {
		h, err = c.be.leave(ctx, r)
		return err
	}
	cctx, cancel := c.releaseContext(ctx)
	err := leave(cctx)
	cancel()
	if err != nil && failure != nil {
		if c.leaveRetries.Add(1) <= maxLeaveRetries {
			held, cancel := context.WithTimeout(context.Background(), r.ttl)
			err = c.retryCleanup(ctx, r.ttl, held.Done(), err, leave)
			cancel()
		}
		c.leaveRetries.Add(-1)
	}
	switch {
	case err != nil:
		c.log.Warn("dlock: leaving the line failed; the place in line expires by itself, and a lock the failed call may have taken ends with its lease",
			"key_hash", KeyHash(r.key), "err", err)
	case h.owner != "":
		c.be.deliver(r.key, h)
	}
}

// maxLeaveRetries bounds the leaves a Client tries again at once (see leaveLine).
const maxLeaveRetries = 1000
