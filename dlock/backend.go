package dlock

import (
	"context"
	"errors"
	"time"
)

// backend is the store behind a Client. Everything that knows Redis (key layout, scripts,
// channels, hash tags) is in the Redis implementation; the acquisition, waiting, watchdog and
// context logic in this package only speaks through this interface, so another store (a SQL
// lock table, a consensus store) can be put behind the same Client.
//
// Every operation must be safe to apply twice, because clients retry after network errors.
type backend interface {
	// acquire takes the lock for r.owner, or (r.wait) puts the owner in line, refreshing its
	// place on every call.
	acquire(ctx context.Context, r acquireRequest) (acquireResult, error)
	// reenter adds the hold entry r.entry for an owner that has the lock; holds < 0: not the
	// owner. With r.skipCompleted and a completion record, it adds nothing and returns the
	// record.
	reenter(ctx context.Context, r reentryRequest) (holds int, record []byte, err error)
	// release drops the hold entry (storing a completion record first when asked); at the last
	// hold the lock is freed and handed to the next waiter, who is told (a waiter of this
	// Client, here, before release returns: woke).
	release(ctx context.Context, r releaseRequest) (releaseResult, error)
	// leave takes a waiter out of line; a lock handed to it meanwhile is passed on.
	leave(ctx context.Context, r acquireRequest) (handOff, error)
	// renew extends each lease still owned by its owner; ok[i] reports which. When only some
	// of its calls failed (a node of several that did not answer), err is a
	// *partialRenewError and ok holds the answers of the others.
	renew(ctx context.Context, rs []renewal) (ok []bool, err error)
	// renewParts splits rs into the parts the store answers independently of each other
	// (on a store of several servers, the renewals each server holds), as positions in rs.
	// The watchdog sends each part in a renew call of its own and applies its answers as
	// they come, so that a server that does not answer holds up no other's. A store of one
	// server returns one part.
	renewParts(ctx context.Context, rs []renewal) [][]int
	// confirm makes a handed-off lock durable before its waiter uses it: extend it to ttl and,
	// if the store replicates, wait for the replicas the Client asks for. ok false: not owner.
	// It is only called when the Client asks for replica acknowledgement.
	confirm(ctx context.Context, key, owner string, ttl time.Duration) (ok bool, err error)
	// record returns the completion record of key.
	record(ctx context.Context, key string) ([]byte, bool, error)
	// listen delivers hand-off notices for one waiting owner.
	listen(ctx context.Context, key, owner string) (listener, error)
	// listenReady is listen when notices for key already reach this process, else nil: then
	// no notice can be missed between a look and the listener.
	listenReady(key, owner string) listener
	// deliver passes a hand-off that leave made to its waiter here, if it is one of ours,
	// ahead of the message.
	deliver(key string, h handOff)
	// bounded reports whether every call ends on its own within the store client's timeouts,
	// so that a context that cannot end cannot hang it.
	bounded() bool
	// answeredSince reports whether any call of this Client got an answer from the store after
	// t: a wait whose own call went unanswered meanwhile met a busy client, not a silent store.
	// A store of several nodes answers false: another node's answer proves nothing.
	answeredSince(t time.Time) bool
	// probe sends the cheapest request that the store node holding key answers only when it
	// would also run a look at the lock (a write), and reports whether it answered before
	// ctx ended.
	probe(ctx context.Context, key string) bool
	// check returns an error matching ErrUnsafeStore when a server of the store is set up so
	// that held locks or records may vanish early, ErrUnavailable when it could not tell.
	check(ctx context.Context) error
	// close stops background work and waits for it.
	close() error
}

type acquireRequest struct {
	key, owner string
	// names is the store's handle on key's names from an earlier acquireResult of the same
	// acquisition (nil: the store makes it from key). The lease keeps it for every later
	// request about the lock (release, renewal), so the names are made once per acquisition.
	names         any
	ttl           time.Duration
	wait          bool
	skipCompleted bool
}

// reentryRequest is a nested acquisition of a lock its owner holds: entry names the new hold.
// wait is Acquire's (a migrating slot is waited out, as for a first acquisition), not
// TryAcquire's.
type reentryRequest struct {
	key, owner, entry   string
	skipCompleted, wait bool
}

type acquireStatus int

const (
	statusBusy acquireStatus = iota
	statusObtained
	statusCompleted
)

// inFlightError is the error of a call that was given up because its context ended while
// the call was still on its way: it goes on in the background, and whether it took effect is
// unknown until finished is closed. A clean-up of its effect must wait for that, or the call
// could take effect after the clean-up (a late acquire taking the lock for an owner that has
// left). Backends return it wrapped in their error.
type inFlightError struct {
	err      error // the context's error
	finished <-chan struct{}
}

func (e *inFlightError) Error() string { return e.err.Error() }
func (e *inFlightError) Unwrap() error { return e.err }

// afterInFlight waits until the call that failed with err, if it is still in flight, is
// over, for at most releaseBound.
func afterInFlight(err error) {
	var fl *inFlightError
	if errors.As(err, &fl) {
		awaitFinished(fl.finished)
	}
}

// awaitFinished waits until finished, a call's end, is closed, for at most releaseBound; it
// reports whether the call is over.
func awaitFinished(finished <-chan struct{}) bool {
	t := time.NewTimer(releaseBound)
	defer t.Stop()
	select {
	case <-finished:
		return true
	case <-t.C:
		return false
	}
}

type acquireResult struct {
	status acquireStatus
	names  any   // the store's handle on the key's names, for the requests that follow
	token  int64 // obtained: ours; busy: the holder's (0 when unknown)
	// busy: time left on the holder's lease; obtained: time left on ours (shorter than the
	// requested ttl when the lock was handed to us and awaits confirmation); < 0 when unknown
	pttl   time.Duration
	record []byte
}

type releaseRequest struct {
	key, owner, entry string
	names             any // see acquireRequest.names
	storeRecord       bool
	record            []byte
	retention         time.Duration
}

// releaseResult: owned false means the caller did not own the lock.
type releaseResult struct {
	left  int
	owned bool
	next  handOff
	// woke: next is a waiter of this Client, and release told it already.
	woke bool
}

// handOff names the waiter a release passed the lock to (owner "" when none), its token, and
// the lease it was granted until it renews.
type handOff struct {
	owner string
	token int64
	lease time.Duration
}

// notice is the hand-off as its waiter hears of it.
func (h handOff) notice() notice { return notice{token: h.token, lease: h.lease} }

type renewal struct {
	key, owner string
	names      any // see acquireRequest.names
	ttl        time.Duration
}

// partialRenewError is renew's error when some renewals have an unknown outcome (failed[i])
// and the others were answered.
type partialRenewError struct {
	failed []bool
	err    error
}

func (e *partialRenewError) Error() string { return e.err.Error() }
func (e *partialRenewError) Unwrap() error { return e.err }

// renewFailed reports whether renewal i of a renew call that returned err has an unknown
// outcome: all of them when err is not a *partialRenewError.
func renewFailed(err error, i int) bool {
	var part *partialRenewError
	if errors.As(err, &part) {
		return part.failed[i]
	}
	return err != nil
}

// notice is what a listener receives: token > 0 means the lock was handed to the waiter with
// that token, valid for lease (0: unknown) until it renews; token 0 means "look again".
type notice struct {
	token int64
	lease time.Duration
}

type listener interface {
	C() <-chan notice
	// Ready is closed once notices published from now on will be delivered.
	Ready() <-chan struct{}
	// Gone is closed when notices can no longer reach this listener (its subscription was
	// lost): the waiter should listen anew. Nil for a listener that cannot be lost.
	Gone() <-chan struct{}
	// Unconfirmed tells the store that Ready was awaited for a whole retry interval in vain:
	// the subscription may have been refused (sent to a node that no longer serves the
	// channel), and Gone is closed if the store thinks so.
	Unconfirmed()
	Close()
}
