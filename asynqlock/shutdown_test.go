package asynqlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// A server shut down while a locked task runs gives the handler ShutdownTimeout, then puts
// the task back in its queue (no retry used up) and cancels the handler's context, whose
// cause is then the task's, not a lost lock. The lock is released when the handler returns,
// which may be after Shutdown returned; the task then runs on another server.
func TestShutdownRequeuesAndReleases(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{}, 1)
	var runs atomic.Int64
	var firstCause atomic.Value
	h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		if runs.Add(1) > 1 {
			return nil
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			firstCause.Store(context.Cause(ctx))
			return ctx.Err()
		case <-time.After(20 * time.Second):
			return errors.New("handler not cancelled at shutdown")
		}
	}), e.lock, taskAccountKey)

	cfg := serverConfig(1)
	cfg.ShutdownTimeout = 200 * time.Millisecond
	first := asynq.NewServerFromRedisClient(e.srv.Client(t), cfg)
	if err := first.Start(h); err != nil {
		t.Fatal(err)
	}
	info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":"3"}`)),
		asynq.MaxRetry(1), asynq.Retention(time.Minute))
	<-started
	first.Shutdown()

	insp := e.inspector(t)
	if ti, err := insp.GetTaskInfo(info.Queue, info.ID); err != nil || ti.State != asynq.TaskStatePending || ti.Retried != 0 {
		t.Fatalf("after Shutdown: %+v, %v; want the task pending again, Retried 0", ti, err)
	}
	// Well within the 30 s lease: the release, not the lease's end, frees the key.
	eventually(t, 10*time.Second, "the lock to be released", func() bool { return len(locktest.Held(t, e.rdb)) == 0 })
	if c, _ := firstCause.Load().(error); !errors.Is(c, context.Canceled) || errors.Is(c, dlock.ErrLockLost) {
		t.Fatalf("first run's context cause %v, want context.Canceled", c)
	}

	e.startServer(t, serverConfig(1), h)
	got := taskState(t, insp, info, asynq.TaskStateCompleted, 10*time.Second)
	if runs.Load() != 2 || got.Retried != 0 {
		t.Fatalf("runs %d, Retried %d; want the requeued task run once more, no retry used", runs.Load(), got.Retried)
	}
}

// A dlock Client closed before the asynq server stopped (the wrong shutdown order) fails the
// tasks that still arrive with dlock.ErrClosed: outcome error, a failure asynq retries under
// its normal policy, never a busy lock and never a run without the lock.
func TestClosedClientFailsTask(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	locks := dlock.New(e.srv.Client(t))
	if err := locks.Close(); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]asynqlock.Option{nil, {asynqlock.WithWait(time.Second)}} {
		ran := false
		h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }),
			locks, taskAccountKey, append(opts, asynqlock.WithTracerProvider(o.TP), asynqlock.WithBusy(asynq.RevokeTask))...)
		err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
		var le *asynqlock.ErrLocked
		if !errors.Is(err, dlock.ErrClosed) || errors.As(err, &le) || errors.Is(err, asynq.RevokeTask) || errors.Is(err, asynq.SkipRetry) || !asynqlock.IsFailure(err) {
			t.Fatalf("err = %v; want a retryable failure wrapping dlock.ErrClosed", err)
		}
		if ran {
			t.Fatal("handler ran without the lock")
		}
		spans := o.Spans.Ended()
		wantSpan(t, spans[len(spans)-1], asynqlock.OutcomeError, codes.Error)
	}
}
