package dlock

import (
	"context"
	"errors"
	"net"
	"time"
)

// grant is an obtained lock as the wait loop saw it.
type grant struct {
	token     int64
	sent      time.Time     // when the request that obtained it (or preceded the hand-off) was sent
	valid     time.Duration // lease granted from sent
	handedOff bool          // the lock came from the line, as the releasing client left it
	confirmed bool          // a handed-off lock already extended to its full lease (confirmHandOff)
	attempts  int
	names     any // the store's handle on the key's names (see acquireRequest.names)
}

// confirmDue reports whether a handed-off grant must be renewed before it is used: its lease,
// counted on our clock from our last look (the earliest the grant can have been made), has
// less than a third left, which is when the watchdog would renew it. That happens when the
// releasing client's claim lease is short against the time this waiter spent since it looked.
func (g *grant) confirmDue() bool {
	return time.Until(g.deadline()) < g.valid/3
}

// deadline is when the lease granted ends on our clock, as the lease counts it (see
// lease.start).
func (g *grant) deadline() time.Time { return g.sent.Add(g.valid - drift(g.valid)) }

// obtain runs the acquisition: one script call when the lock is free; otherwise, if r.wait,
// a place in line and a wait for the hand-off message, looking again every retry interval
// (or when the holder's lease runs out) in case a message was lost. The first look runs with
// first (see WithMaxWait), the rest of the wait with ctx.
func (c *Client) obtain(ctx, first context.Context, r acquireRequest) (g grant, err error) {
	var left <-chan struct{} // the clean-up after a failed look
	var leftAt time.Time
	try := func(ctx context.Context) (acquireResult, error) {
		g.attempts++
		g.sent = time.Now()
		res, err := c.be.acquire(ctx, r)
		if res.names != nil {
			r.names, g.names = res.names, res.names
		}
		if err != nil {
			// The script may have run and given us the lock (reply lost, or ctx ended while the
			// call was in flight), or queued us: take us out, so no lock is left that nobody
			// will release, and no place in line.
			leftAt = time.Now()
			left = c.cleanup(ctx, r, err)
		}
		return res, err
	}
	// lookFailed is the error of an acquisition whose look failed with err, returned once
	// the clean-up is over (see awaitLeave).
	lookFailed := func(ctx context.Context, err error) error {
		err = c.lookErr(ctx, r.key, err, g.sent)
		c.awaitLeave(left, leftAt)
		return err
	}
	// A waiter on a channel this process already listens to registers before its first look,
	// so no hand-off can slip between the look and the listener, and one look is enough.
	var lis listener
	if r.wait {
		if !c.beginWait() {
			return g, ErrClosed
		}
		defer c.waits.Done()
		lis = c.be.listenReady(r.key, r.owner)
	}
	defer func() {
		if lis != nil {
			lis.Close()
		}
	}()
	res, err := try(first)
	if err != nil {
		return g, lookFailed(first, err)
	}
	if done, err := c.settled(&g, r, res); done {
		return g, err
	}
	queuedAt := g.sent
	// Every hand-off to us comes after our last look found the lock busy, so its token is
	// above the holder's token that look saw. A notice at or below it was sent before that
	// look: we were handed the lock, did not take it up in time (paused past the claim
	// lease), and it went on. Such a notice is stale.
	busyToken := res.token
	timer := time.NewTimer(c.cfg.retry)
	defer timer.Stop()
	// A wait whose subscription could not be made (its SUBSCRIBE failed: the pub/sub
	// connection broke under it, or cannot be dialled, while commands go through) polls, and
	// subscribes again after a look, which keeps its place in line alive: after the next look
	// for the first failure in a row (go-redis dials a broken connection anew in the failed
	// call or the next one), after the look of every retry interval from then on. Once
	// subscribed again, it is woken by messages, not left to look every retry interval for
	// the rest of its wait. A wait whose subscription is lost (Gone: also a SUBSCRIBE that
	// fails after listen returned) looks at once and subscribes again after that look.
	failures, resubscribe := 0, false
	// subscribe listens for the hand-off (look once more after it: the release may have come
	// between our last look and the subscription). It returns a non-nil error when the wait
	// is over.
	subscribe := func() error {
		var err error
		lis, err = c.be.listen(ctx, r.key, r.owner)
		switch {
		case err != nil && ctx.Err() != nil:
			// The context ended while the subscription was being made (its connection dialled,
			// SUBSCRIBE sent): as any wait that ends between looks, unless Redis fell silent.
			start := time.Now()
			left := c.cleanup(ctx, r, nil)
			err = c.waitEnded(ctx, r.key)
			c.awaitLeave(left, start)
			return err
		case errors.Is(err, ErrClosed):
			c.cleanup(ctx, r, nil) // Close waits for it
			return ErrClosed
		case err != nil:
			// No subscription: the wait goes on by looking, and subscribes again (see
			// failures). A Redis that is down shows at the next look, which comes at once.
			if failures == 0 {
				c.log.Warn("dlock: waiting without pub/sub; looking every retry interval until subscribed again",
					"key_hash", KeyHash(r.key), "err", err)
			}
			failures++
			lis, resubscribe = polling{}, failures == 1
			return nil
		}
		failures = 0
		timer.Reset(min(c.cfg.retry, confirmWait))
		select {
		case <-lis.Ready():
		case <-lis.Gone():
			// Its SUBSCRIBE failed (or its connection was lost) before Redis confirmed it: the
			// wait looks at once, and subscribes again after that look (see the wait loop).
		case <-timer.C:
			lis.Unconfirmed()
		case <-ctx.Done():
			start := time.Now()
			left := c.cleanup(ctx, r, nil)
			err := c.waitEnded(ctx, r.key)
			c.awaitLeave(left, start)
			return err
		case <-c.closing:
			c.cleanup(ctx, r, nil) // Close waits for it
			return ErrClosed
		}
		return nil
	}
	look := false
	if lis == nil {
		if err := subscribe(); err != nil {
			return g, err
		}
		look = true
	}
	for {
		if look {
			if isClosed(c.closing) {
				// Close began while this wait went to look (after a notice, or the loss of
				// its subscription): a look would only put it back in line.
				c.cleanup(ctx, r, nil) // Close waits for it
				return g, ErrClosed
			}
			if res, err = try(ctx); err != nil {
				return g, lookFailed(ctx, err)
			}
			if done, err := c.settled(&g, r, res); done {
				return g, err
			}
			queuedAt = g.sent
			busyToken = max(busyToken, res.token)
		}
		look = true
		if isClosed(lis.Gone()) {
			// The subscription was lost (its node gave the slot away, or its SUBSCRIBE failed
			// after listen returned): listen anew, now that this look has kept our place in
			// line alive. Subscribing first would put a dial, and the wait for Redis to
			// confirm, between this wait's looks.
			lis.Close()
			lis, resubscribe = polling{}, true
		}
		if resubscribe {
			resubscribe = false
			if err := subscribe(); err != nil {
				return g, err
			}
			if _, ok := lis.(polling); !ok {
				continue // look once more: the release may have come before the subscription
			}
		}
		next := c.cfg.retry
		if res.pttl >= 0 && res.pttl < next {
			next = res.pttl + time.Millisecond // look again when the holder's lease ends
		}
		timer.Reset(next)
		// A subscription still unconfirmed (the wait went on without it after confirmWait,
		// or the connection broke before Redis answered): a hand-off published before Redis
		// had it reached nobody, so its confirmation, when it comes, is a reason to look.
		var lateReady <-chan struct{}
		if !isClosed(lis.Ready()) {
			lateReady = lis.Ready()
		}
		select {
		case <-lateReady:
		case <-ctx.Done():
			start := time.Now()
			left := c.cleanup(ctx, r, nil)
			err := c.waitEnded(ctx, r.key)
			c.awaitLeave(left, start)
			return g, err
		case <-c.closing:
			c.cleanup(ctx, r, nil) // Close waits for it
			return g, ErrClosed
		case <-lis.Gone():
			// The subscription was lost: look at once, then listen anew (above).
		case n := <-lis.C():
			if n.token == 0 || n.lease <= 0 || n.token <= busyToken {
				continue // look again now (a notice without its lease: the look tells it; a stale one)
			}
			if ctx.Err() != nil {
				c.awaitLeave(c.cleanup(ctx, r, nil), time.Now())
				return g, &waitError{ctxErr: ctx.Err()}
			}
			// Handed to us. It was granted after our last look that found us queued, so that
			// look's send time is a safe start for the lease on our clock. The lease is the
			// releasing client's claim, which the notice carries.
			g.token, g.sent, g.valid, g.handedOff = n.token, queuedAt, n.lease, true
			return g, nil
		case <-timer.C:
			if _, ok := lis.(polling); ok {
				resubscribe = true // after the look that comes now
			} else if !isClosed(lis.Ready()) {
				lis.Unconfirmed() // still: ask again, the Cluster's layout may have changed
			}
		}
	}
}

// confirmWait is how long a wait waits for its subscription to be confirmed before it looks
// at the lock anyway (the retry interval, if shorter) and asks the listener whether the
// subscription went to a node that no longer serves the slot (Unconfirmed).
const confirmWait = 250 * time.Millisecond

// polling is the listener of a wait without subscription: no notice ever comes, so the wait
// loop looks again every retry interval (or when the holder's lease ends), and subscribes
// again after its looks.
type polling struct{}

var closedReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (polling) C() <-chan notice       { return nil }
func (polling) Ready() <-chan struct{} { return closedReady }
func (polling) Gone() <-chan struct{}  { return nil }
func (polling) Unconfirmed()           {}
func (polling) Close()                 {}

// settled reports whether res ends the acquisition, and with which error.
func (c *Client) settled(g *grant, r acquireRequest, res acquireResult) (bool, error) {
	switch res.status {
	case statusObtained:
		g.token, g.valid = res.token, r.ttl
		if res.pttl > 0 && res.pttl < r.ttl {
			// Handed to us while we were looking: it holds only the claim lease until we
			// confirm it, and we are hearing of it from our own look, not the message.
			g.valid, g.handedOff = res.pttl, true
		}
		return true, nil
	case statusCompleted:
		return true, &CompletedError{Key: r.key, Record: res.record}
	}
	if !r.wait {
		return true, ErrNotObtained
	}
	return false, nil
}

// storeSilence is how long a look at the lock must have gone unanswered, with no other call
// of the Client answered meanwhile, when the wait's context ended, for the end to be put
// down to the store rather than to a busy lock. Redis answers a look in well under a
// millisecond.
const storeSilence = 100 * time.Millisecond

// lookErr is the error of a wait for key whose look at the lock, sent at sent, failed with
// err. When ctx ended, the wait ran out (ErrNotObtained and the context's error), unless the
// store is what failed: the look failed with an error of its own, or it went unanswered for
// storeSilence (Redis paused, partitioned, a dial that hangs) with no sign of a merely busy
// client (on a single server, another call of this Client answered meanwhile; see
// answeredSince), and a probe sent then went unanswered for storeSilence too. The error then
// matches err (so ErrUnavailable) and the context's error, not ErrNotObtained.
//
// The probe is for a process that stalled (GC, CPU starved) past the wait's deadline: it
// cannot have read the answers waiting in its sockets, and must not blame the store for it.
// It delays the error of a silent store by up to storeSilence past the deadline.
func (c *Client) lookErr(ctx context.Context, key string, err error, sent time.Time) error {
	// go-redis ends a read at ctx's deadline itself (ContextTimeoutEnabled), with a network
	// timeout, a moment before ctx ends: the same end as a ctx error.
	timedOut := atDeadline(ctx, err)
	if ctx.Err() == nil {
		if !timedOut {
			return err
		}
		<-ctx.Done() // its deadline is at most a millisecond away
	}
	byCtx := timedOut || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	if byCtx {
		if time.Since(sent) < storeSilence || c.be.answeredSince(sent) {
			return &waitError{ctxErr: ctx.Err()}
		}
		// Close bounds nothing: no probe then.
		if !c.closed.Load() && c.probeAnswered(ctx, key, sent) {
			return &waitError{ctxErr: ctx.Err()}
		}
	}
	return &silentStoreError{ctxErr: ctx.Err(), err: err}
}

// waitEnded is the error of a wait for key whose context ended between two looks at the
// lock. The last look found it busy, but it may be a while ago (waits hear of releases by
// message, and look only every retry interval): the store may have stopped answering since.
// Unless it answered this Client within storeSilence, a probe is sent, bounded by
// storeSilence as in lookErr. Answered, the wait ran out (ErrNotObtained and the context's
// error); unanswered, the store is what failed (ErrUnavailable and the context's error), so
// a caller does not take an outage for a busy lock.
func (c *Client) waitEnded(ctx context.Context, key string) error {
	recent := time.Now().Add(-storeSilence)
	if c.be.answeredSince(recent) || c.closed.Load() || c.probeAnswered(ctx, key, recent) {
		return &waitError{ctxErr: ctx.Err()}
	}
	return &silentStoreError{ctxErr: ctx.Err(), err: unavailable("wait", errNoAnswer)}
}

// probeAnswered sends a probe for key, bounded by storeSilence whatever ctx's state, and
// reports whether it, or another call of the Client since since, was answered.
//
// A probe unanswered while this process was itself stopped (SIGSTOP, container CPU
// throttling, a long pause) proves nothing: its answer may sit unread in the socket when
// the bound passes, and go-redis then reports a timeout. It is sent again, up to maxProbes
// in all, so that the store is blamed only for storeSilence in which the process ran. A
// process that ran throughout reports a silent store after one probe, as before
// (TestStalledProcessProbeIsNotSilentStore).
func (c *Client) probeAnswered(ctx context.Context, key string, since time.Time) bool {
	for range maxProbes {
		stalled := watchStalls()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeSilence)
		answered := c.be.probe(pctx, key) || c.be.answeredSince(since)
		cancel()
		if !stalled() || answered || c.closed.Load() {
			return answered
		}
	}
	return false
}

// maxProbes bounds the probes of probeAnswered: a process starved of CPU over and over
// still reports a silent store, after maxProbes × storeSilence at most.
const maxProbes = 3

// stallTick is how often watchStalls reads the clock; stallGap is the gap between two of
// its reads from which the process counts as stopped: a goroutine due to run did not run.
// Redis answers a probe in well under a millisecond; an answer left unread for storeSilence
// means a stop of about that length, far above stallGap.
const (
	stallTick = storeSilence / 10
	stallGap  = storeSilence / 4
)

// watchStalls watches, in a goroutine, whether this process stops running; the returned
// stop ends the watch, waits for the goroutine, and reports whether it did.
func watchStalls() (stop func() bool) {
	quit, longest := make(chan struct{}), make(chan time.Duration, 1)
	last := time.Now() // here: the goroutine may first run only after a stop
	go func() {
		t := time.NewTicker(stallTick)
		defer t.Stop()
		var gap time.Duration
		for {
			select {
			case <-t.C:
			case <-quit:
				longest <- max(gap, time.Since(last))
				return
			}
			now := time.Now()
			gap, last = max(gap, now.Sub(last)), now
		}
	}()
	return func() bool {
		close(quit)
		return <-longest >= stallGap
	}
}

// errNoAnswer is why a store counts as silent when a probe went unanswered.
var errNoAnswer = errors.New("no answer to a probe sent when the wait ended")

// atDeadline reports whether err is a network timeout that came with ctx's deadline: after
// it, or at most a millisecond before it.
func atDeadline(ctx context.Context, err error) bool {
	d, ok := ctx.Deadline()
	var ne net.Error
	return ok && errors.As(err, &ne) && ne.Timeout() && time.Until(d) <= time.Millisecond
}
