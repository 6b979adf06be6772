package dlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strconv"
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
	auto  bool // renewed by the watchdog

	// renewing holds a token while a renewal of this lease is in flight (a Refresh, or the
	// watchdog's batch), so that no two cross: the lease must end on our clock no later than
	// in Redis, and with two renewals in flight we could not tell which one Redis applied last.
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

// Lock is one hold of a distributed lock. The first Acquire of a key makes the outermost hold;
// an Acquire of the same key with a context carrying the lock (WithLock) makes a re-entrant hold
// of the same lease: same Token, HoldCount one higher, and the key stays locked until every
// hold is released. A Lock is safe for concurrent use.
type Lock struct {
	l        *lease
	entry    string
	mu       sync.Mutex
	released bool
}

// drift is the margin taken off a lease on the holder's clock, so that the holder gives the
// lock up before Redis can give it to someone else: 1% of the lease plus 2 ms.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

func newLease(c *Client, key, owner string, token int64, ttl time.Duration, auto bool) *lease {
	l := &lease{c: c, key: key, owner: owner, token: token, ttl: ttl, auto: auto, holds: 1, entries: 1,
		renewing: make(chan struct{}, 1)}
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
	l.expiry = time.AfterFunc(time.Until(l.deadline), func() { l.end(lost(reason)) })
}

// extended records a successful renewal sent at sent for ttl.
func (l *lease) extended(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.deadline = sent.Add(ttl - drift(ttl))
	l.expiry.Reset(time.Until(l.deadline))
}

// shortened brings the local deadline forward to what a renewal to ttl sent at sent gives,
// if that is earlier: for a renewal whose outcome is unknown.
func (l *lease) shortened(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if d := sent.Add(ttl - drift(ttl)); d.Before(l.deadline) {
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

// boundFrom returns the live context WithLock made from ctx for lk, or nil. ctx must be of
// a comparable type.
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

// Key returns the key the lock was acquired for.
func (lk *Lock) Key() string { return lk.l.key }

// Token returns the fencing token of the lease: strictly greater than the token of every earlier
// acquisition of this key (re-entrant holds share the token of the outermost). Pass it to the
// resource you write to and have it reject writes with a lower token than it has seen: that
// makes a holder whose lease ran out while it was paused harmless.
func (lk *Lock) Token() int64 { return lk.l.token }

// HoldCount returns how many holds of this lease are not yet released: 1 for a plain lock,
// more while re-entrant holds are open. It is 0 once the lease ended.
func (lk *Lock) HoldCount() int {
	lk.l.mu.Lock()
	defer lk.l.mu.Unlock()
	if lk.l.ended {
		return 0
	}
	return lk.l.holds
}

// Done returns a channel that is closed when the lease ends: after the last hold is released,
// or when the lock is lost. Err tells which.
func (lk *Lock) Done() <-chan struct{} { return lk.l.done() }

// Err returns nil while this hold is held. After the lease was lost it returns an error matching
// ErrLockLost; after this hold (or the whole lease) was released, an error matching ErrNotHeld.
func (lk *Lock) Err() error {
	if err := lk.l.err(); err != nil {
		return err
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released {
		return ErrNotHeld
	}
	return nil
}

// isReleased reports whether this hold was released.
func (lk *Lock) isReleased() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.released
}

// Release releases this hold. The key is freed (and handed to the next waiter, if any) when
// the last hold of the lease is released. It returns ErrNotHeld for a hold already released,
// an error matching ErrLockLost (and ErrNotHeld) when the lease was lost before (a lease lost
// on our clock only, which runs ahead of Redis's, still has the hold taken off in Redis, so
// the last one frees the lock there if Redis has it as ours), and an error matching
// ErrUnavailable when Redis could not be reached; in that last case the lock is no longer
// renewed and expires at the end of its lease, or, for a hold that was not the last, the
// hold is taken off in the background (tried again until Redis answers, while the lease
// lasts) so the other holds' release still frees the key. Pass
// context.WithoutCancel of an ended context to release anyway: a context that cannot end is
// bounded by the Redis client's timeouts, or by 5 s when it has none (ReadTimeout -1).
func (lk *Lock) Release(ctx context.Context) error {
	return lk.release(ctx, releaseRequest{})
}

// Complete stores record for the key, kept for retention, and releases this hold in the same
// atomic step, so no acquisition can come between the two. Later acquisitions with
// SkipCompleted get a *CompletedError carrying the record instead of the lock. On a re-entrant
// (inner) hold the record is stored at once while the outer hold keeps the key locked: waiters
// with SkipCompleted are then told of the completion before the outer work ends. Errors are
// those of Release; retention must be positive. On a lease lost on our clock only (Redis
// still has it as ours), the record is stored with the release all the same, and the loss is
// returned.
func (lk *Lock) Complete(ctx context.Context, record []byte, retention time.Duration) error {
	if retention <= 0 {
		return fmt.Errorf("dlock: complete: retention must be positive, got %v", retention)
	}
	return lk.release(ctx, releaseRequest{storeRecord: true, record: record, retention: retention})
}

func (lk *Lock) release(ctx context.Context, r releaseRequest) error {
	l := lk.l
	lk.mu.Lock()
	if lk.released {
		lk.mu.Unlock()
		return ErrNotHeld
	}
	lk.released = true
	lk.mu.Unlock()
	// The contexts WithLock made for this hold end with it, also while other holds keep the
	// lease: a loop of nested holds (Do under a long-held lock) keeps nothing per hold.
	defer l.unbind(lk)

	l.mu.Lock()
	l.holds--
	last := l.holds == 0
	wd := l.watchedBy
	l.mu.Unlock()
	if err := l.err(); err != nil {
		if errors.Is(err, ErrLockLost) {
			// Lost on our clock, which runs ahead of Redis's by design, or ended by Close: the
			// lock may still be ours there. Take this hold off there (the script checks the
			// owner), so that the last one frees it rather than leave it held to the end of
			// its lease, storing Complete's record with it as a release would; the loss stays
			// the answer.
			r.key, r.owner, r.entry, r.names = l.key, l.owner, lk.entry, l.names
			ctx, cancel := l.c.boundedContext(ctx)
			defer cancel()
			_, _ = l.c.be.release(ctx, r)
		}
		return err
	}
	if last && wd != nil {
		wd.remove(l) // no renewal may follow the release
	}

	r.key, r.owner, r.entry, r.names = l.key, l.owner, lk.entry, l.names
	ctx, cancel := l.c.boundedContext(ctx)
	defer cancel()
	res, err := l.c.be.release(ctx, r)
	switch {
	case err != nil:
		if last {
			// Stop renewing: the lock expires at the end of its lease at the latest.
			l.end(ErrNotHeld)
			return err
		}
		// The hold may still be in Redis (the call failed before reaching it, or its reply
		// was lost): take it off in the background, or the release of the other holds would
		// find it there and keep the key locked and renewed with nobody left to free it.
		l.c.dropHold(ctx, l, lk.entry, err)
		return err
	case !res.owned:
		err := lost("released by its owner but held by no one or another owner")
		l.end(err)
		return err
	case res.left == 0:
		l.end(ErrNotHeld)
		if res.woke {
			// Handed to a waiter of this Client, told already: let it run now, on this
			// thread, as sync.Mutex hands off to a starving waiter. Woken on another, idle
			// one, it would wait for that thread to wake up, which on a small or virtual
			// machine takes longer than the Redis round trip that freed the lock.
			runtime.Gosched()
		}
	case last && wd != nil:
		// Not the last hold after all: a re-entry's script ran before ours. That hold is
		// live, so the lease must be renewed again.
		wd.add(l)
	}
	return nil
}

// Refresh sets the remaining lease to ttl, for locks acquired WithTTL that need more time.
// A watchdog-renewed lock keeps being renewed with the Client lease afterwards, the next time
// within a third of ttl; the watchdog does not renew it while a Refresh is in flight. It returns
// ErrNotHeld for a released hold, an error matching ErrLockLost when the lock was lost (also
// when someone else owns it now: their lock is not touched), ErrUnavailable wrapping Redis
// errors or the context's end, and an error for a ttl below MinLease. When the outcome is
// unknown (ErrUnavailable), the lock counts on the shorter of its old lease and ttl.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < MinLease {
		return fmt.Errorf("dlock: refresh: ttl must be at least %v, got %v", MinLease, ttl)
	}
	if err := lk.Err(); err != nil {
		return err
	}
	l := lk.l
	select {
	case l.renewing <- struct{}{}:
	case <-ctx.Done():
		return unavailable("refresh", ctx.Err())
	}
	sent := time.Now()
	ok, err := l.c.be.renew(ctx, []renewal{{key: l.key, owner: l.owner, names: l.names, ttl: ttl}})
	if err != nil {
		// The outcome is unknown: Redis may have applied ttl, or may yet (a call given up by
		// its context still runs). Count on the shorter of the two leases, and let no other
		// renewal start until the call is over, so the two cannot cross. A lease the
		// watchdog renews may now end before its next renewal: renew it once the call is over.
		l.shortened(sent, ttl)
		go func() {
			afterInFlight(err)
			<-l.renewing
			if wd := l.watcher(); wd != nil {
				wd.renewBy(l, time.Now())
			}
		}()
		return err
	}
	defer func() { <-l.renewing }()
	if !ok[0] {
		if l.releasing() {
			// The last hold's release (here, or on another goroutine) freed the key while
			// this Refresh was on its way: released, not lost. The release reports a loss.
			return ErrNotHeld
		}
		err := lost("refresh found the lock gone or owned by another owner")
		l.end(err)
		return err
	}
	l.extended(sent, ttl)
	l.mu.Lock()
	fixedHandOff := l.confirm && !l.auto
	l.confirm = false // the lease is ttl now: no confirmation renewal may set it back
	l.mu.Unlock()
	if wd := l.watcher(); wd != nil {
		if fixedHandOff {
			wd.remove(l) // a fixed lease is not renewed
		} else {
			wd.renewBy(l, sent.Add(ttl/3)) // a short ttl must not run out before the next renewal
		}
	}
	return nil
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

// reenter adds a hold to the lease for a nested Acquire. With skipCompleted, a completion
// record of the key answers *CompletedError instead, as it does for a first acquisition.
func (lk *Lock) reenter(ctx context.Context, skipCompleted bool) (*Lock, error) {
	l := lk.l
	if err := l.err(); err != nil {
		if !errors.Is(err, ErrLockLost) {
			// Released since the caller found it in ctx: ctx, which ends with the lease,
			// is ending, and answers as it does right after the release.
			return nil, &waitError{ctxErr: context.Canceled}
		}
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &waitError{ctxErr: err} // as a first acquisition answers
	}
	l.mu.Lock()
	l.entries++
	entry := strconv.FormatInt(l.entries, 10)
	l.mu.Unlock()
	sent := time.Now()
	n, record, err := l.c.be.reenter(ctx, l.key, l.owner, entry, skipCompleted)
	if record != nil {
		return nil, &CompletedError{Key: l.key, Record: record}
	}
	if err != nil {
		// The script may have added the hold before the reply was lost: take it out again,
		// or the key would outlive the releases of the holds the caller knows of.
		l.c.dropHold(ctx, l, entry, err)
		return nil, l.c.lookErr(ctx, l.key, err, sent) // a context that ended is not a store failure
	}
	if n < 0 {
		if l.releasing() {
			// The last hold's release freed the key while this re-entry was on its way: the
			// context it re-enters with is ending (cause ErrNotHeld), as after the release.
			return nil, &waitError{ctxErr: context.Canceled}
		}
		err := lost("re-entry found the lock gone or owned by another owner")
		l.end(err)
		return nil, err
	}
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	return &Lock{l: l, entry: entry}, nil
}

type ctxKey struct{}

// held is the list of locks a context carries.
type held struct {
	lk   *Lock
	next *held
}

// WithLock returns a context that carries lk and ends when ctx ends, when lk is released, or
// when the lease of lk ends (a re-entrant hold shares its lease with the outer one); its cause
// is then ErrLockLost (lost) or ErrNotHeld (released). It ends in the goroutine that
// ends the lease, without a goroutine of its own: once the Release that ends the lease has
// returned, the context is done. Acquire of the same key on the same Client with this context
// re-enters lk instead of waiting for it. Give this context to the work done under the lock,
// so a lost lock stops that work.
//
// The lease keeps each context it returned until that context or the lease ends. A call with
// the same ctx and lk as an earlier one whose context is live returns that context again, so
// a loop that derives a context per unit of work from one long-lived ctx under a long-held
// lock does not accumulate them.
func WithLock(ctx context.Context, lk *Lock) context.Context {
	var from context.Context
	if ctx != nil && reflect.TypeOf(ctx).Comparable() {
		if out := lk.l.boundFrom(ctx, lk); out != nil {
			return out
		}
		from = ctx
	}
	cctx, cancel := context.WithCancelCause(ctx)
	prev, _ := ctx.Value(ctxKey{}).(*held)
	out := context.WithValue(cctx, ctxKey{}, &held{lk: lk, next: prev})
	lk.l.bind(bound{ctx: cctx, cancel: cancel, from: from, lk: lk, out: out})
	return out
}

// FromContext returns the innermost lock that ctx carries (see WithLock), for its fencing
// token or key; ok is false when ctx carries none. The lock may have ended since: check Err.
func FromContext(ctx context.Context) (lk *Lock, ok bool) {
	if h, _ := ctx.Value(ctxKey{}).(*held); h != nil {
		return h.lk, true
	}
	return nil, false
}

// heldIn returns the innermost live hold of key by c in ctx.
func heldIn(ctx context.Context, c *Client, key string) *Lock {
	for h, _ := ctx.Value(ctxKey{}).(*held); h != nil; h = h.next {
		if h.lk.l.c == c && h.lk.l.key == key && h.lk.l.err() == nil {
			return h.lk
		}
	}
	return nil
}
