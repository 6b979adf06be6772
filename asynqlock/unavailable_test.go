package asynqlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A lock store that does not answer while a task waits for its lock (CLIENT PAUSE here; a
// partition or a hanging dial in production) is not a busy lock: the task fails with an
// error wrapping dlock.ErrUnavailable, retried by asynq as a failure, instead of bouncing as
// busy without using a retry or, with OncePerSlot, being dropped.
func TestSilentStoreDuringWaitIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  *keyfunc.Func
		task *asynq.Task
		opts []asynqlock.Option
	}{
		{"WithWait", taskAccountKey, asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)),
			[]asynqlock.Option{asynqlock.WithWait(time.Second)}},
		{"OncePerSlot", keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType)), asynq.NewTask("report:build", nil),
			[]asynqlock.Option{asynqlock.OncePerSlot(2 * time.Second)}}, // wait 1 s, busy = RevokeTask
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			var ran atomic.Int64
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil }),
				e.lock, tc.key, tc.opts...)
			// Warm up the client's connection and scripts on a different key.
			if lk, err := e.lock.TryAcquire(ctx, "warmup"); err != nil {
				t.Fatal(err)
			} else {
				_ = lk.Release(ctx)
			}
			if err := e.srv.Pause(ctx, 4*time.Second); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := h.ProcessTask(ctx, tc.task)
			t.Logf("after %s: err = %v", time.Since(start).Round(time.Millisecond), err)
			var le *asynqlock.ErrLocked
			if errors.As(err, &le) || errors.Is(err, asynq.RevokeTask) || !asynqlock.IsFailure(err) || !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("lock store not answering: err = %v (busy %v, RevokeTask %v, IsFailure %v); "+
					"want a failure wrapping dlock.ErrUnavailable, not a busy lock",
					err, errors.As(err, &le), errors.Is(err, asynq.RevokeTask), asynqlock.IsFailure(err))
			}
			if ran.Load() != 0 {
				t.Fatal("handler ran without the lock")
			}
			// Let the pause end before the cleanups close the clients.
			time.Sleep(time.Until(start.Add(4 * time.Second)))
		})
	}
}

// The lock is busy when the task starts waiting, and the store stops answering during the
// wait (paused, or its server gone), between two looks at the lock: the task fails with an
// error wrapping dlock.ErrUnavailable. Reported busy, it would bounce without using a retry,
// or with WithBusy(asynq.RevokeTask) (OncePerSlot's default) be dropped.
func TestStoreSilentDuringBusyWaitIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*env) error
	}{
		{"paused", func(e *env) error { return e.srv.Pause(context.Background(), 3*time.Second) }},
		{"killed", func(e *env) error { return e.srv.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			var ran atomic.Int64
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil }),
				e.lock, taskAccountKey, asynqlock.WithWait(800*time.Millisecond), asynqlock.WithBusy(asynq.RevokeTask))
			holder := dlock.New(e.srv.Client(t))
			t.Cleanup(func() { _ = holder.Close() })
			if _, err := holder.Acquire(ctx, "account:1"); err != nil {
				t.Fatal(err)
			}
			faulted := make(chan error, 1)
			go func() {
				time.Sleep(300 * time.Millisecond) // the task waits in line
				faulted <- tc.fault(e)
			}()
			err := h.ProcessTask(ctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
			if ferr := <-faulted; ferr != nil {
				t.Fatal(ferr)
			}
			var le *asynqlock.ErrLocked
			if errors.As(err, &le) || errors.Is(err, asynq.RevokeTask) || !asynqlock.IsFailure(err) || !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("store %s during the wait: err = %v (busy %v, RevokeTask %v, IsFailure %v); "+
					"want a failure wrapping dlock.ErrUnavailable, not a busy lock",
					tc.name, err, errors.As(err, &le), errors.Is(err, asynq.RevokeTask), asynqlock.IsFailure(err))
			}
			if ran.Load() != 0 {
				t.Fatal("handler ran without the lock")
			}
		})
	}
}
