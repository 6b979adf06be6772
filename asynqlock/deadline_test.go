package asynqlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
)

// finalState polls a task until it is completed, archived or gone (revoked), and returns
// that state ("completed", "archived", "gone") with the last info seen.
func finalState(t *testing.T, insp *asynq.Inspector, info *asynq.TaskInfo, timeout time.Duration) (string, *asynq.TaskInfo) {
	t.Helper()
	var state string
	var last *asynq.TaskInfo
	eventually(t, timeout, "task "+info.ID+" to reach a final state", func() bool {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			state = "gone"
			return true
		case err != nil:
			return false
		}
		last = ti
		switch ti.State {
		case asynq.TaskStateCompleted:
			state = "completed"
			return true
		case asynq.TaskStateArchived:
			state = "archived"
			return true
		}
		return false
	})
	return state, last
}

// A task whose WithWait is longer than its own timeout must answer busy before asynq's
// deadline: a task whose context ends in the middleware is a failure with the deadline's
// error (its retries spent, archived), and WithBusy(RevokeTask), OncePerSlot's default,
// would never apply.
func TestBusyWaitEndsBeforeTaskDeadline(t *testing.T) {
	t.Run("default busy retries", func(t *testing.T) {
		e := newEnv(t)
		ctx := t.Context()
		var runs atomic.Int64
		errs := &errorLog{}
		cfg := serverConfig(2)
		cfg.ErrorHandler = errs
		cfg.RetryDelayFunc = asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
		mux := asynq.NewServeMux()
		mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			runs.Add(1)
			return nil
		}), e.lock, taskAccountKey, asynqlock.WithWait(10*time.Second), asynqlock.WithRetryIn(time.Second)))
		e.startServer(t, cfg, mux)

		held, err := e.lock.Acquire(ctx, "account:7")
		if err != nil {
			t.Fatal(err)
		}
		release := time.AfterFunc(5*time.Second, func() { _ = held.Release(context.Background()) })
		defer release.Stop()

		info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":7}`)),
			asynq.Timeout(time.Second), asynq.MaxRetry(1), asynq.Retention(time.Minute))
		state, got := finalState(t, e.inspector(t), info, 30*time.Second)
		var busy int
		for _, err := range errs.all() {
			var le *asynqlock.ErrLocked
			if errors.As(err, &le) {
				busy++
			}
		}
		t.Logf("state %s, Retried %d, runs %d, errors %v", state, got.Retried, runs.Load(), errs.all())
		if state != "completed" || runs.Load() != 1 || got.Retried != 0 {
			t.Fatalf("busy task with Timeout(1s) < WithWait(10s): state %s, Retried %d, runs %d, %d of %d errors busy; "+
				"want it completed after the holder released, with no retry used up", state, got.Retried, runs.Load(), busy, len(errs.all()))
		}
	})

	t.Run("RevokeTask as with OncePerSlot", func(t *testing.T) {
		e := newEnv(t)
		ctx := t.Context()
		errs := &errorLog{}
		cfg := serverConfig(2)
		cfg.ErrorHandler = errs
		mux := asynq.NewServeMux()
		mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
			t.Error("handler ran on a busy lock")
			return nil
		}), e.lock, taskAccountKey, asynqlock.WithWait(10*time.Second), asynqlock.WithBusy(asynq.RevokeTask)))
		e.startServer(t, cfg, mux)

		held, err := e.lock.Acquire(ctx, "account:8")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(context.Background()) }()

		info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":8}`)),
			asynq.Timeout(time.Second), asynq.MaxRetry(0), asynq.Retention(time.Minute))
		state, got := finalState(t, e.inspector(t), info, 20*time.Second)
		lastErr := ""
		if got != nil {
			lastErr = got.LastErr
		}
		if state != "gone" {
			t.Fatalf("busy task with WithBusy(RevokeTask) and Timeout(1s) < WithWait(10s): %s (LastErr %q, errors %v); want it revoked",
				state, lastErr, errs.all())
		}
	})
}
