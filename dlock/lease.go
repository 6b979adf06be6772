package dlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// lease is the state shared by all holds of one owner on one key: the outermost acquisition
// and its re-entries.
type lease struct {
	c     *Client
	key   string
	names any // the store's handle on key's names (see acquireRequest.names)
	owner string
	token int64
	ttl   time.Duration
	auto  bool      // renewed by the watchdog
	since time.Time // when the lease was obtained, for the hold histogram

	// renewing holds a token while a renewal of this lease is in flight (a Refresh, or the
	// watchdog's batch, also one given up that may still reach Redis), so that no two cross:
	// the lease must end on our clock no later than in Redis, and with two renewals in flight
	// we could not tell which one Redis applied last.
	// A channel, not a mutex: a Refresh waiting for the watchdog's batch must heed its context.
	renewing chan struct{}

	mu        sync.Mutex
	holds     int
	entries   int64
	ended     bool
	deadline  time.Time   // end of the lease on our clock, drift margin subtracted
	expiry    *time.Timer // fires at deadline: the lease is lost unless renewed first
	renewAt   time.Time   // next watchdog renewal
	retrying  bool        // renewAt is a retry (after a failure or a skip): not batched early
	batched   bool        // in a watchdog batch in flight (holding renewing): collect skips it
	confirm   bool        // handed off: holds the claim lease until renewed to the full ttl
	fixedEnd  time.Time   // a handed-off WithTTL lease: when it ends, ttl after it was obtained
	watchedBy *watchdog
	cause     error   // why the lease ended, once ended
	bound     []bound // contexts of WithLock that end with the lease
	// finished is set once end has counted and logged the end: from then on err reports
	// cause, and doneCh (made on first use by done: most leases end unwatched) is closed.
	finished bool
	doneCh   chan struct{}
}

// bound is a context made by WithLock, ended by the lease's end in the same goroutine: no
// goroutine per WithLock, and a Release returns with every bound context already ended.
type bound struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	// from and lk are the arguments of the WithLock call, and out what it returned: a call
	// with the same (comparable) context and lock returns out again (see WithLock).
	from context.Context
	lk   *Lock
	out  context.Context
}

// drift is the margin taken off a lease on the holder's clock, so that the holder gives the
// lock up before Redis can give it to someone else: 1% of the lease plus 2 ms.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func newLease(c *Client, key, owner string, token int64, ttl time.Duration, auto bool) *lease {
	l := &lease{c: c, key: key, owner: owner, token: token, ttl: ttl, auto: auto, holds: 1, entries: 1,
		renewing: make(chan struct{}, 1), since: time.Now()}
	return l
}

// start arms the local expiry: the lease was valid for valid from the moment base, when the
// request that obtained it was sent.
func (l *lease) start(base time.Time, valid time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadline = base.Add(valid - drift(valid))
	reason := "lease expired before it was renewed"
	if !l.auto {
		reason = "lease set by WithTTL ran out (such a lease is not renewed)"
	}
	l.expiry = time.AfterFunc(time.Until(l.deadline), func() { l.end(lost(EndExpired, reason)) })
}

// extended records a successful renewal sent at sent for ttl. It reports false when the lease
// has ended already, or is ending (its expiry fired, and end waits for l.mu): an answer that
// came after the local deadline renews nothing.
func (l *lease) extended(sent time.Time, ttl time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || !l.expiry.Stop() {
		return false
	}
	l.deadline = sent.Add(ttl - drift(ttl))
	l.expiry.Reset(time.Until(l.deadline))
	return true
}

// shortened brings the local deadline forward to what a renewal to ttl sent at sent gives,
// if that is earlier: for a renewal whose outcome is unknown.
func (l *lease) shortened(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	// Not once the expiry has fired: re-armed, it would run end again, and extended could
	// then stop the new one and renew a lease that is ending.
	if d := sent.Add(ttl - drift(ttl)); d.Before(l.deadline) && l.expiry.Stop() {
		l.deadline = d
		l.expiry.Reset(time.Until(d))
	}
}

// end finishes the lease once with cause: ErrNotHeld after the last release, a lost error
// otherwise. It reports whether this call ended it.
func (l *lease) end(cause error) bool {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return false
	}
	l.ended, l.cause = true, cause
	if l.expiry != nil {
		l.expiry.Stop()
	}
	wd, bound := l.watchedBy, l.bound
	l.bound = nil
	l.mu.Unlock()
	if wd != nil {
		wd.remove(l)
	}
	// Count and log first, so whoever Done wakes sees both.
	l.c.tel.ended(l, cause)
	if errors.Is(cause, ErrLockLost) {
		l.c.log.Warn("dlock: lock lost", "key_hash", KeyHash(l.key), "token", l.token, "cause", cause)
	}
	l.mu.Lock()
	l.finished = true
	if l.doneCh != nil {
		close(l.doneCh)
	}
	l.mu.Unlock()
	for _, b := range bound {
		b.cancel(cause)
	}
	return true
}

// bind makes b.ctx (with b.cancel) end when the lease ends, or when the hold b.lk is
// released (see unbind), or ends it now if either happened already. Contexts that ended on
// their own are dropped as the list grows, so a lease held for long by many short requests
// keeps only the live ones.
func (l *lease) bind(b bound) {
	l.mu.Lock()
	if l.ended {
		cause := l.cause
		l.mu.Unlock()
		b.cancel(cause)
		return
	}
	// Checked under l.mu: a release marks its hold released before its unbind takes l.mu,
	// so a context bound here is either seen released now or dropped by that unbind.
	if b.lk != nil && b.lk.isReleased() {
		l.mu.Unlock()
		b.cancel(ErrNotHeld)
		return
	}
	if len(l.bound) == cap(l.bound) {
		l.bound = slices.DeleteFunc(l.bound, func(b bound) bool { return b.ctx.Err() != nil })
	}
	l.bound = append(l.bound, b)
	l.mu.Unlock()
}

// unbind ends, with cause ErrNotHeld, the contexts WithLock made for the hold lk, and drops
// them. The lease's end ends every context anyway.
func (l *lease) unbind(lk *Lock) {
	var ended []bound
	l.mu.Lock()
	l.bound = slices.DeleteFunc(l.bound, func(b bound) bool {
		if b.lk == lk {
			ended = append(ended, b)
			return true
		}
		return false
	})
	l.mu.Unlock()
	for _, b := range ended {
		b.cancel(ErrNotHeld)
	}
}

// boundFrom returns the live context WithLock made from ctx for lk, or nil. ctx must be a
// comparable value.
func (l *lease) boundFrom(ctx context.Context, lk *Lock) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.bound {
		if b.lk == lk && b.from == ctx && b.ctx.Err() == nil {
			return b.out
		}
	}
	return nil
}

// err is nil while the lease is live, else its cause.
func (l *lease) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.finished {
		return nil
	}
	return l.cause
}

// done returns a channel that is closed when the lease ends (see finished).
func (l *lease) done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.doneCh == nil {
		l.doneCh = make(chan struct{})
		if l.finished {
			close(l.doneCh)
		}
	}
	return l.doneCh
}

// releasing reports whether the last hold was released (its release may still be on its
// way): the key is then gone from Redis by the holder's own doing, not lost.
func (l *lease) releasing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holds == 0
}

// renewTTL is the lease a renewal sets: the Client lease, or, for the confirmation of a
// handed-off WithTTL lease, what is left of its ttl since it was obtained, so that the
// confirmation does not make it outlive its ttl.
func (l *lease) renewTTL() time.Duration {
	if l.fixedEnd.IsZero() {
		return l.ttl
	}
	return max(time.Until(l.fixedEnd), time.Millisecond)
}

// watcher is the watchdog renewing l, or nil.
func (l *lease) watcher() *watchdog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watchedBy
}
