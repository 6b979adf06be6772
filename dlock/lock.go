package dlock

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"
)

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
// lasts) so the other holds' release still frees the key. A context that had ended before
// the call does not stop the release: it is sent as with context.WithoutCancel(ctx), so that
// defer lock.Release(ctx) frees the key after a request's context ended; only a context that
// ends while the call is on its way gives up on it. A context that cannot end is bounded by
// the Redis client's timeouts, or by 5 s when it has none (ReadTimeout -1). It panics for a
// nil ctx, as every call of the package does, before anything changes.
func (lk *Lock) Release(ctx context.Context) error {
	mustContext(ctx, "Release")
	return lk.release(ctx, releaseRequest{})
}

// Complete stores record for the key, kept for retention, and releases this hold in the same
// atomic step, so no acquisition can come between the two. Later acquisitions with
// SkipCompleted get a *CompletedError carrying the record instead of the lock. On a re-entrant
// (inner) hold the record is stored at once while the outer hold keeps the key locked: waiters
// with SkipCompleted are then told of the completion before the outer work ends. Errors are
// those of Release; a retention that is not positive gives an error matching
// ErrInvalidArgument, and the hold stays held. On a lease lost on our clock only (Redis
// still has it as ours), the record is stored with the release all the same, and the loss is
// returned.
func (lk *Lock) Complete(ctx context.Context, record []byte, retention time.Duration) error {
	mustContext(ctx, "Complete")
	if retention <= 0 {
		return invalidArgument("dlock: complete: retention must be positive, got %v", retention)
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
			ctx, cancel := l.c.sendContext(ctx)
			defer cancel()
			_, _ = l.c.be.release(ctx, r)
		}
		return err
	}
	if last && wd != nil {
		wd.remove(l) // no renewal may follow the release
	}

	r.key, r.owner, r.entry, r.names = l.key, l.owner, lk.entry, l.names
	ctx, cancel := l.c.sendContext(ctx)
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
		err := lost(EndTaken, "released by its owner but held by no one or another owner")
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
// errors or the context's end (a context that had ended sends nothing and changes nothing),
// and an error matching ErrInvalidArgument for a ttl below MinLease (nothing is sent, the
// lease stays as it was). When the outcome is unknown (ErrUnavailable), the lock counts on
// the shorter of its old lease and ttl, until the answer of a call given up by ctx but still
// on its way comes: it counts then as if it had come in time. An answer that comes after the
// lease ended on our clock renews nothing (the error matches ErrLockLost), and frees the lock
// in Redis.
func (lk *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	mustContext(ctx, "Refresh")
	if ttl < MinLease {
		return invalidArgument("dlock: refresh: ttl must be at least %v, got %v", MinLease, ttl)
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
	if err := ctx.Err(); err != nil {
		// Ended before the call, or as the token came (select picks at random among ready
		// cases): nothing is sent, so the outcome is known and the lease stays as it was.
		<-l.renewing
		return unavailable("refresh", err)
	}
	sent := time.Now()
	ok, err := l.c.be.renew(ctx, []renewal{{key: l.key, owner: l.owner, names: l.names, ttl: ttl}})
	if err != nil {
		// The outcome is unknown: Redis may have applied ttl, or may yet (a call given up by
		// its context still runs). Count on the shorter of the two leases, and let no other
		// renewal start until the call is over, so the two cannot cross. Its answer, if it
		// comes, counts as the watchdog's late answers do; without one, a lease the watchdog
		// renews may now end before its next renewal: renew it once the call is over.
		// Close waits for that (see watchdog.background). A Refresh after Close began (a
		// WithTTL lock keeps its lease at Close) still keeps the token until the call is
		// over, on a goroutine of its own: Close cannot wait for what starts after it.
		l.shortened(sent, ttl)
		settle := func() {
			renewedAt := time.Now()
			var late *lateRenewError
			if errors.As(err, &late) && len(late.parts) == 1 {
				if ok, failed := late.parts[0].wait(); !failed[0] {
					_ = l.refreshed(sent, ttl, ok[0])
					renewedAt = sent.Add(ttl / 3)
				}
			} else {
				afterInFlight(err)
			}
			<-l.renewing
			if wd := l.watcher(); wd != nil {
				wd.renewBy(l, renewedAt)
			}
		}
		if !l.c.wd.background(settle) {
			go settle()
		}
		return err
	}
	defer func() { <-l.renewing }()
	return l.refreshed(sent, ttl, ok[0])
}

// refreshed applies the answer to a Refresh to ttl sent at sent, and returns what Refresh
// returns: ok, the lock is ours for ttl from then (unless the lease ended on our clock before
// the answer came: then it is freed in Redis, where it is held for nobody); not ok, it is
// gone.
func (l *lease) refreshed(sent time.Time, ttl time.Duration, ok bool) error {
	if !ok {
		if l.releasing() {
			// The last hold's release (here, or on another goroutine) freed the key while
			// this Refresh was on its way: released, not lost. The release reports a loss.
			return ErrNotHeld
		}
		err := lost(EndTaken, "refresh found the lock gone or owned by another owner")
		l.end(err)
		return err
	}
	if !l.extended(sent, ttl) {
		if !l.releasing() {
			l.c.wd.free(l)
		}
		<-l.done() // ended, or ending (see extended)
		return l.err()
	}
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

// errHoldReleased is reenter's answer when the last hold of the lease it would join was
// released as it came (see Client.acquire).
var errHoldReleased = errors.New("dlock: the hold re-entered was released")

// reenter adds a hold to the lease for a nested Acquire (wait) or TryAcquire. With
// skipCompleted, a completion record of the key answers *CompletedError instead, as it does
// for a first acquisition.
func (lk *Lock) reenter(ctx context.Context, skipCompleted, wait bool) (*Lock, error) {
	l := lk.l
	if err := l.err(); err != nil {
		if !errors.Is(err, ErrLockLost) {
			return nil, errHoldReleased // since the caller found it in ctx
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
	n, record, err := l.c.be.reenter(ctx, reentryRequest{key: l.key, owner: l.owner, entry: entry,
		skipCompleted: skipCompleted, wait: wait})
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
			// The last hold's release freed the key while this re-entry was on its way.
			return nil, errHoldReleased
		}
		err := lost(EndTaken, "re-entry found the lock gone or owned by another owner")
		l.end(err)
		return nil, err
	}
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	return &Lock{l: l, entry: entry}, nil
}
