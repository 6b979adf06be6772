package dlock

import (
	"errors"
	"fmt"
)

var (
	// ErrNotObtained is returned when the lock is held by someone else: at once by TryAcquire,
	// and by Acquire when its context ends first (then the error also matches the context's
	// error with errors.Is). A wait whose context ended while Redis was not answering (a look
	// at the lock unanswered for 100 ms or more, and a probe sent then unanswered for 100 ms
	// more, during which this process ran: it is sent again, up to 3 times, after a stop of
	// the process itself) fails with ErrUnavailable and the context's error instead: the lock
	// may well have been free.
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld is returned by Release, Complete and Refresh on a hold that was already
	// released, and by calls on a lock that someone else owns now.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrLockLost is the cause of a lock's context when its lease was lost: it expired, was
	// deleted, taken over, or could not be renewed before the lease ran out on the holder's
	// clock. Errors that match ErrLockLost also match ErrNotHeld.
	ErrLockLost = errors.New("dlock: lock lost")

	// ErrInvalidKey is returned for an empty key or one longer than MaxKeyLen bytes.
	ErrInvalidKey = errors.New("dlock: invalid key")

	// ErrInvalidArgument is matched by the error of a call given a value it cannot take: a
	// Refresh ttl below MinLease, a Complete retention that is not positive. It is the
	// caller's mistake, found before Redis is asked: nothing is sent and nothing changes
	// (Complete does not release the hold).
	ErrInvalidArgument = errors.New("dlock: invalid argument")

	// ErrUnavailable wraps every error of the backing store (connection refused, timeouts,
	// script errors), so callers can tell "the store is down" from "the lock is busy".
	ErrUnavailable = errors.New("dlock: store unavailable")

	// ErrCompleted is matched by a *CompletedError: the work under this key was recorded as
	// done by Complete, and the acquisition asked to skip completed work (SkipCompleted).
	ErrCompleted = errors.New("dlock: already completed")

	// ErrClosed is returned by calls on a Client after Close.
	ErrClosed = errors.New("dlock: client closed")
)

// MaxKeyLen is the longest key, in bytes, that Acquire accepts. Longer keys are rejected with
// ErrInvalidKey rather than truncated, so two keys can never silently map to one lock; derive
// bounded keys (package keyfunc does) or hash long ones before locking.
const MaxKeyLen = 512

// CompletedError reports that Complete stored a record for the key. It matches ErrCompleted.
type CompletedError struct {
	Key    string // the lock key
	Record []byte // the record given to Complete
}

// Error implements error. It names the key by its hash, as telemetry does: keys may hold
// user data, and error texts end up in logs.
func (e *CompletedError) Error() string {
	return "dlock: already completed (key hash " + KeyHash(e.Key) + ")"
}

// Is reports whether target is ErrCompleted.
func (e *CompletedError) Is(target error) bool { return target == ErrCompleted }

// lostError is the ErrLockLost value with the reason attached, and its cause: one of the
// End* values, for telemetry.
type lostError struct{ cause, reason string }

func (e *lostError) Error() string { return "dlock: lock lost: " + e.reason }

func (e *lostError) Is(target error) bool { return target == ErrLockLost || target == ErrNotHeld }

// lost is the error of a lease lost for reason: cause is EndExpired (it ran out on our clock),
// EndTaken (Redis had it gone or another owner's) or EndClosed (Client.Close ended it).
func lost(cause, reason string) error { return &lostError{cause: cause, reason: reason} }

// waitError is returned when a wait ended with its context: it matches ErrNotObtained and the
// context's error.
type waitError struct{ ctxErr error }

func (e *waitError) Error() string { return "dlock: not obtained: " + e.ctxErr.Error() }

func (e *waitError) Unwrap() []error { return []error{ErrNotObtained, e.ctxErr} }

// silentStoreError is returned when a wait's context ended while the store was not
// answering: its look at the lock, or the probe sent when the wait ended between looks. It
// matches the store's error (ErrUnavailable) and the context's error, and not
// ErrNotObtained, since nobody knows whether the lock was busy.
type silentStoreError struct{ ctxErr, err error }

func (e *silentStoreError) Error() string {
	return "dlock: the store did not answer before the context ended: " + e.err.Error()
}

func (e *silentStoreError) Unwrap() []error { return []error{e.err, e.ctxErr} }

// argumentError is the error of an argument a call refused. Its text is the message alone,
// as it was before these errors matched ErrInvalidArgument; it wraps ErrInvalidArgument.
type argumentError struct{ msg string }

func (e *argumentError) Error() string { return e.msg }

func (e *argumentError) Unwrap() error { return ErrInvalidArgument }

func invalidArgument(format string, args ...any) error {
	return &argumentError{msg: fmt.Sprintf(format, args...)}
}

func unavailable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}
