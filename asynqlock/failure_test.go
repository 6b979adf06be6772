package asynqlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

// Deleting the lock key mid-task cancels the handler with dlock.ErrLockLost as the cause;
// the task fails with an error wrapping it, and asynq runs it again.
func TestLostLockCancelsHandler(t *testing.T) {
	e := newEnv(t, dlock.WithLease(300*time.Millisecond)) // the watchdog notices within ~100 ms
	ctx := t.Context()

	started := make(chan struct{}, 1)
	var attempts atomic.Int64
	var cause atomic.Value
	errs := &errorLog{}
	cfg := serverConfig(2)
	cfg.ErrorHandler = errs
	cfg.RetryDelayFunc = asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
	mux := asynq.NewServeMux()
	mux.Use(asynqlock.New(e.lock, taskAccountKey))
	mux.HandleFunc("account:deduct", func(ctx context.Context, _ *asynq.Task) error {
		if attempts.Add(1) > 1 {
			return nil
		}
		started <- struct{}{}
		select {
		case <-ctx.Done():
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("handler was not cancelled")
		}
	})
	e.startServer(t, cfg, mux)
	info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":"9"}`)),
		asynq.MaxRetry(1), asynq.Retention(time.Minute))

	<-started
	keys, err := e.rdb.Keys(ctx, "*:lock").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("lock keys %v, %v: want one", keys, err)
	}
	if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}

	got := taskState(t, e.inspector(t), info, asynq.TaskStateCompleted, 10*time.Second)
	if c, _ := cause.Load().(error); !errors.Is(c, dlock.ErrLockLost) {
		t.Fatalf("handler context cause %v, want dlock.ErrLockLost", c)
	}
	all := errs.all()
	if len(all) != 1 || !errors.Is(all[0], dlock.ErrLockLost) || !errors.Is(all[0], context.Canceled) {
		t.Fatalf("task errors %v: want one wrapping dlock.ErrLockLost and the handler's error", all)
	}
	if attempts.Load() != 2 || got.Retried != 1 {
		t.Fatalf("attempts %d, Retried %d: want the lost run retried once", attempts.Load(), got.Retried)
	}
}

// A payload that is not JSON, or lacks the key's field, is archived at once: retrying
// cannot fix it, and the handler never runs.
func TestBadInputArchived(t *testing.T) {
	e := newEnv(t)
	var ran atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(asynqlock.New(e.lock, taskAccountKey))
	mux.HandleFunc("account:deduct", func(context.Context, *asynq.Task) error { ran.Add(1); return nil })
	e.startServer(t, serverConfig(2), mux)
	c, insp := e.client(t), e.inspector(t)

	for _, tc := range []struct {
		name    string
		payload string
		msg     string
	}{
		{"not JSON", `account_id=7`, "malformed body"},
		{"missing field", `{"amount":5}`, `part "account_id": missing value`},
		{"null field", `{"account_id":null}`, "missing value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := e.enqueue(t, c, asynq.NewTask("account:deduct", []byte(tc.payload)), asynq.MaxRetry(5))
			got := taskState(t, insp, info, asynq.TaskStateArchived, 10*time.Second)
			if got.Retried != 0 || !strings.Contains(got.LastErr, tc.msg) || !strings.Contains(got.LastErr, "asynqlock:") {
				t.Fatalf("archived with Retried %d, LastErr %q: want no retry and a message naming %q", got.Retried, got.LastErr, tc.msg)
			}
		})
	}
	if ran.Load() != 0 {
		t.Fatalf("handler ran %d times on bad input", ran.Load())
	}

	// The error itself, for an application's ErrorHandler.
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), e.lock, taskAccountKey)
	err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{}`)))
	var pe *keyfunc.PartError
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, keyfunc.ErrMissing) || !errors.As(err, &pe) {
		t.Fatalf("err = %v: want asynq.SkipRetry wrapping the *keyfunc.PartError", err)
	}

	// A key that keyfunc accepts but dlock refuses (over dlock.MaxKeyLen): not run, archived.
	long := keyfunc.Join(keyfunc.JSON("id").HashAbove(1000)).With(keyfunc.WithMaxKeyLen(dlock.MaxKeyLen + 100))
	h = asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("handler ran with a key dlock refused")
		return nil
	}), e.lock, long)
	err = h.ProcessTask(t.Context(), asynq.NewTask("t", []byte(`{"id":"`+strings.Repeat("a", dlock.MaxKeyLen+50)+`"}`)))
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, dlock.ErrInvalidKey) {
		t.Fatalf("err = %v: want asynq.SkipRetry wrapping dlock.ErrInvalidKey", err)
	}
}

// With Redis for locks down the task is not run and fails with dlock.ErrUnavailable, which
// asynq retries with its normal policy (it is a failure).
func TestLockStoreUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	locks := dlock.New(srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }))
	t.Cleanup(func() { _ = locks.Close() })
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil }), locks, taskAccountKey)
	err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, asynq.SkipRetry) || !asynqlock.IsFailure(err) {
		t.Fatalf("err = %v: want a retryable failure wrapping dlock.ErrUnavailable", err)
	}
	if ran.Load() != 0 {
		t.Fatal("handler ran without the lock")
	}
}

// A panicking handler releases its lock, so the key is not held until the process exits.
func TestPanicReleasesLock(t *testing.T) {
	e := newEnv(t)
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") }), e.lock, taskAccountKey)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	}()
	lk, err := e.lock.TryAcquire(t.Context(), "account:1")
	if err != nil {
		t.Fatalf("lock still held after the panic: %v", err)
	}
	_ = lk.Release(t.Context())
}

// asynq reports a recovered panic as "panic [file:line]: value", from where it was raised.
// The middleware frees the lock without recovering the panic, so the archived task still
// names the handler's line, not the middleware's.
func TestPanicKeepsItsLocation(t *testing.T) {
	e := newEnv(t)
	mux := asynq.NewServeMux()
	boom := func(context.Context, *asynq.Task) error { panic("boom") } // this file
	mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(boom), e.lock, taskAccountKey))
	e.startServer(t, serverConfig(2), mux)
	c, insp := e.client(t), e.inspector(t)
	info := e.enqueue(t, c, asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)), asynq.MaxRetry(0))
	got := taskState(t, insp, info, asynq.TaskStateArchived, 10*time.Second)
	if !strings.Contains(got.LastErr, "failure_test.go") || !strings.Contains(got.LastErr, "boom") {
		t.Fatalf("archived with %q, want the panic located in the handler's file", got.LastErr)
	}
	lk, err := e.lock.TryAcquire(t.Context(), "account:1")
	if err != nil {
		t.Fatalf("lock still held after the panic: %v", err)
	}
	_ = lk.Release(t.Context())
}

// A task run with a context that already carries the key's lock re-enters it. When that lock
// was lost (its key is gone), the task fails with dlock.ErrLockLost under asynq's normal retry
// policy: it is not "busy" (nobody else may hold the key, and a busy error with WithBusy
// RevokeTask would drop it). A hand-off that runs out before it is confirmed never gets
// here: dlock queues the waiter again itself.
func TestReentryIntoLostLockFails(t *testing.T) {
	e := newEnv(t)
	var ran atomic.Int64
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran.Add(1); return nil }),
		e.lock, taskAccountKey)
	outer, err := e.lock.TryAcquire(t.Context(), "account:1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = outer.Release(t.Context()) }()
	keys := locktest.Held(t, e.rdb)
	if len(keys) != 1 {
		t.Fatalf("lock keys %v, want one", keys)
	}
	if err := e.rdb.Del(t.Context(), keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	err = h.ProcessTask(dlock.WithLock(t.Context(), outer), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	var locked *asynqlock.ErrLocked
	if !errors.Is(err, dlock.ErrLockLost) || errors.As(err, &locked) || !asynqlock.IsFailure(err) || ran.Load() != 0 {
		t.Fatalf("err = %v, handler ran %d times: want a failure wrapping dlock.ErrLockLost, not busy, no run", err, ran.Load())
	}
}

// Two layers, as in the shop's refund worker: an outer one per order, an inner one per
// account that waits and answers busy with RevokeTask. The outer lease is lost while the
// inner layer waits for the account: the task must fail as lost and be retried under the
// normal policy (its retry counted), not be revoked as busy, and then run once.
func TestOuterLockLostDuringInnerWaitIsRetried(t *testing.T) {
	e := newEnv(t, dlock.WithLease(300*time.Millisecond))
	ctx := t.Context()
	var runs atomic.Int64
	errs := &errorLog{}
	cfg := serverConfig(2)
	cfg.ErrorHandler = errs
	cfg.RetryDelayFunc = asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
	orderKey := keyfunc.Join(keyfunc.Const("order"), keyfunc.JSON("order_id"))
	inner := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}), e.lock, taskAccountKey, asynqlock.WithWait(5*time.Second), asynqlock.WithBusy(asynq.RevokeTask))
	mux := asynq.NewServeMux()
	mux.Handle("refund", asynqlock.Wrap(inner, e.lock, orderKey))
	e.startServer(t, cfg, mux)

	held, err := e.lock.Acquire(ctx, "account:7") // an HTTP request holds the account
	if err != nil {
		t.Fatal(err)
	}
	info := e.enqueue(t, e.client(t), asynq.NewTask("refund", []byte(`{"order_id":"o1","account_id":"7"}`)),
		asynq.MaxRetry(3), asynq.Retention(time.Minute))
	var orderLock string
	eventually(t, 10*time.Second, "the task to hold the order and wait for the account", func() bool {
		for _, k := range locktest.Held(t, e.rdb) {
			if strings.Contains(k, "order:o1") {
				orderLock = k
				return true
			}
		}
		return false
	})
	if err := e.rdb.Del(ctx, orderLock).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the task's error", func() bool { return len(errs.all()) > 0 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	state, got := finalState(t, e.inspector(t), info, 20*time.Second)
	first := errs.all()[0]
	var locked *asynqlock.ErrLocked
	if !errors.Is(first, dlock.ErrLockLost) || errors.Is(first, asynq.RevokeTask) || errors.As(first, &locked) || !asynqlock.IsFailure(first) {
		t.Fatalf("task error %v: want a failure wrapping dlock.ErrLockLost, neither RevokeTask nor busy", first)
	}
	if state != "completed" || got.Retried != 1 || runs.Load() != 1 {
		t.Fatalf("task %s, Retried %v, handler ran %d times: want it retried once, then run once", state, got, runs.Load())
	}
}

// A wait that the task's own context ends (the task is cancelled or an enclosing lock is
// lost) says nothing of who holds the lock: it is not busy, and WithBusy does not decide.
// And a handler error that would steer asynq (RevokeTask, SkipRetry, busy) does not decide
// once the lock was lost: the loss is retried.
func TestTaskContextEndingIsNotBusy(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t, dlock.WithLease(300*time.Millisecond))
	held, err := e.lock.Acquire(t.Context(), "account:1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, taskAccountKey, asynqlock.WithWait(5*time.Second), asynqlock.WithBusy(asynq.RevokeTask),
		asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	cause := errors.New("task cancelled")
	ctx, cancel := context.WithCancelCause(t.Context())
	time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
	err = h.ProcessTask(ctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	var locked *asynqlock.ErrLocked
	if !errors.Is(err, cause) || errors.Is(err, asynq.RevokeTask) || errors.As(err, &locked) {
		t.Fatalf("wait ended by the task's context: %v, want an error wrapping its cause, not busy", err)
	}
	// Telemetry tells it apart from contention (busy) and from other failures (error); the
	// task failed, so the span did too.
	wantSpan(t, oneSpan(t, o), asynqlock.OutcomeCanceled, codes.Error)
	if got := o.CounterByAttr(t, "asynqlock.tasks", "asynqlock.outcome"); got[asynqlock.OutcomeCanceled] != 1 || len(got) != 1 {
		t.Errorf("asynqlock.tasks by outcome %v, want canceled:1", got)
	}

	for _, herr := range []error{asynq.RevokeTask, asynq.SkipRetry, &asynqlock.ErrLocked{Key: "account:2", RetryIn: time.Second}} {
		o := oteltest.New(t)
		h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
			lk, _ := asynqlock.FromContext(ctx)
			if err := e.rdb.Del(ctx, "lockguard:{order:o2}:lock").Err(); err != nil {
				t.Error(err)
			}
			<-lk.Done()
			return fmt.Errorf("handler: %w", herr)
		}), e.lock, keyfunc.Join(keyfunc.Const("order"), keyfunc.JSON("order_id")), asynqlock.WithTracerProvider(o.TP))
		err := h.ProcessTask(t.Context(), asynq.NewTask("refund", []byte(`{"order_id":"o2"}`)))
		if !errors.Is(err, dlock.ErrLockLost) || errors.Is(err, asynq.RevokeTask) || errors.Is(err, asynq.SkipRetry) ||
			errors.As(err, &locked) || !asynqlock.IsFailure(err) || !strings.Contains(err.Error(), herr.Error()) {
			t.Errorf("lock lost, handler returned %v: task error %v, want a lost failure that asynq retries, naming the handler's error", herr, err)
		}
		// Not revoked: asynq retries the task, whatever the handler said.
		s := oneSpan(t, o)
		wantSpan(t, s, asynqlock.OutcomeLost, codes.Error)
		if v := oteltest.Attr(s, "asynqlock.revoked"); v != "" {
			t.Errorf("lock lost, handler returned %v: span has asynqlock.revoked=%s, want none", herr, v)
		}
	}
}
