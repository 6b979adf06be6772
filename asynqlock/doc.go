// Package asynqlock runs asynq task handlers under dlock locks, for the three things
// asynq.Unique cannot do: serialize different tasks that touch one account, stop an
// at-least-once redelivery from running a payment twice, and run a periodic job once per
// schedule slot when every replica runs a scheduler.
//
// It only translates: keys come from package keyfunc (through the task Source, see
// NewSource), lock semantics from package dlock. A task and an HTTP route that derive the
// same key exclude each other:
//
//	var accountKey = keyfunc.Join(keyfunc.Const("account"), keyfunc.JSON("account_id").Integer()) // "account:42"
//
//	mux := asynq.NewServeMux()
//	// Wrap the task types that carry the key; mux.Use(asynqlock.New(...)) would lock every
//	// type, and archive those whose payload lacks account_id.
//	mux.Handle("account:deduct", asynqlock.Wrap(deduct, locks, accountKey))
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      asynqlock.IsFailure,         // a busy task does not use up a retry
//		RetryDelayFunc: asynqlock.RetryDelay(nil), // and comes back after RetryIn
//	})
//
// asynq still calls Config.ErrorHandler for a busy task; skip those there with
// errors.As(err, new(*asynqlock.ErrLocked)) if it alerts.
//
// Per task the middleware derives the key (a payload that is not JSON or lacks a required
// field is archived with asynq.SkipRetry: retrying cannot fix it; a keyfunc.From function's
// own error is returned for asynq to retry, see keyfunc.IsInputError), takes the lock without
// waiting (WithWait to queue for it), and runs the handler with a context that carries the
// lock and is cancelled if the lease is lost. A busy lock returns an *ErrLocked carrying
// RetryIn (WithRetryIn's 5 s plus up to half again at random, WithRetryJitter, so that tasks
// busy on one key do not all come back at once), or asynq.SkipRetry / asynq.RevokeTask with
// WithBusy; a wait ends before the task's own deadline so that asynq sees that answer, and a
// Redis that stops answering during the wait is a failure (dlock.ErrUnavailable), not a busy
// lock; so is a wait that the task's own context ends (the task cancelled, or an enclosing
// layer's lock lost): it fails with the context's cause, and WithBusy does not apply. With
// WithDoneMarker a successful task records its key as done in the same atomic step that
// releases the lock, and later tasks with that key are acknowledged without running.
// OncePerSlot adds the schedule slot to the key and turns the done marker on; WithSlotLocation
// counts the slots in the schedule's time zone, so daylight saving changes neither skip nor
// repeat a run. The lock is per slot: to keep a run that outlasts its slot apart from the next
// one, nest a plain lock on the same key inside (docs/asynqlock.md, recipe 3).
//
// Each task gets an asynqlock.lock span (a child of the enqueuing request's span when the
// task was made with NewTask), with the outcome and a hash of the key as attributes. A
// handler returning asynq.RevokeTask drops its task on purpose: its span is no error, and
// says asynqlock.revoked; asynq.SkipRetry archives the task, a failure, and its span says so.
//
// Guarantees: two tasks (or a task and any other holder) with the same key never run their
// locked sections at the same time while their leases hold; with a done marker, a task whose
// key is marked done never runs its handler, and the marker is written only by the holder of
// the lock, atomically with the release.
//
// Limits: a lease can be lost (a long pause, a Redis failover); the handler is then
// cancelled and the task fails with dlock.ErrLockLost, but work it already did stays done:
// pass the lock's fencing token (FromContext) to the store you write to. Done markers live
// only for their retention. A task with no retries left (MaxRetry(0) included) is archived
// by asynq when it is busy, before IsFailure is consulted. At asynq's Shutdown a task still
// running after ShutdownTimeout goes back to its queue and its context is cancelled; its lock
// is released when the handler returns, which may be after Shutdown returned: close the dlock
// Client after the server (a closed Client fails tasks with dlock.ErrClosed, retried as
// failures). See docs/asynqlock.md for recipes.
package asynqlock
