package asynqlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/dlock"
)

// ErrLocked is returned by the middleware when the task's lock is held by someone else (by
// another task, or by an HTTP request locking the same key). The task did not run. It
// matches dlock.ErrNotObtained. A server configured with IsFailure and RetryDelay runs the
// task again after RetryIn without consuming one of its retries.
type ErrLocked struct {
	Key string // the lock key; may hold user data, so Error prints only a hash
	// RetryIn is when to try again: WithRetryIn's delay plus WithRetryJitter's random extra,
	// the delay RetryDelay gives asynq. 0 when WithBusy archives or drops the task
	// (asynq.SkipRetry, asynq.RevokeTask), which is then not tried again.
	RetryIn time.Duration
}

// Error implements error. It names RetryIn when there is a retry to come.
func (e *ErrLocked) Error() string {
	if e.RetryIn <= 0 {
		return fmt.Sprintf("asynqlock: lock %s busy", dlock.KeyHash(e.Key))
	}
	return fmt.Sprintf("asynqlock: lock %s busy, retry in %s", dlock.KeyHash(e.Key), e.RetryIn)
}

// Unwrap returns dlock.ErrNotObtained.
func (e *ErrLocked) Unwrap() error { return dlock.ErrNotObtained }

// IsFailure is for asynq.Config.IsFailure: it reports false for nil and for errors holding an
// *ErrLocked, so a busy task is retried without its retry counter being incremented (and
// without counting in the queue's processed and failed stats); true for every other error.
// Note that asynq archives a task whose retries are already used up (including a task with
// MaxRetry(0)) before consulting IsFailure.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	var le *ErrLocked
	return !errors.As(err, &le)
}

// RetryDelay is for asynq.Config.RetryDelayFunc: a task that failed with an *ErrLocked comes
// back after its RetryIn; any other error gets fallback's delay, or
// asynq.DefaultRetryDelayFunc's when fallback is nil.
func RetryDelay(fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		var le *ErrLocked
		if errors.As(err, &le) && le.RetryIn > 0 {
			return le.RetryIn
		}
		return fallback(n, err, t)
	}
}
