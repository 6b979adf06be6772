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

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
)

// A task finding its lock busy comes back after RetryIn, as often as needed, without using
// up its retries: with MaxRetry(1), a server without asynqlock.IsFailure archives it after
// the second busy attempt (the control case shows the test can fail).
func TestBusyRetriedWithoutConsumingRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		isFailure bool
		want      asynq.TaskState
	}{
		{"with IsFailure", true, asynq.TaskStateCompleted},
		{"without IsFailure retries run out", false, asynq.TaskStateArchived},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()

			var busy, runs, retryCount atomic.Int64
			errs := &errorLog{}
			cfg := serverConfig(4)
			if !tc.isFailure {
				cfg.IsFailure = nil
			}
			cfg.ErrorHandler = asynq.ErrorHandlerFunc(func(ctx context.Context, task *asynq.Task, err error) {
				var le *asynqlock.ErrLocked
				if errors.As(err, &le) && errors.Is(err, dlock.ErrNotObtained) {
					busy.Add(1)
				}
				errs.HandleError(ctx, task, err)
			})
			mux := asynq.NewServeMux()
			mux.Use(asynqlock.New(e.lock, taskAccountKey, asynqlock.WithRetryIn(time.Second)))
			mux.HandleFunc("account:deduct", func(ctx context.Context, _ *asynq.Task) error {
				n, _ := asynq.GetRetryCount(ctx)
				retryCount.Store(int64(n))
				runs.Add(1)
				return nil
			})
			e.startServer(t, cfg, mux)

			// Someone else (an HTTP request, say) holds account:7 while the task arrives.
			held, err := e.lock.Acquire(ctx, "account:7")
			if err != nil {
				t.Fatal(err)
			}
			info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":7}`)),
				asynq.MaxRetry(1), asynq.Retention(time.Minute))
			insp := e.inspector(t)
			if tc.want == asynq.TaskStateArchived {
				got := taskState(t, insp, info, asynq.TaskStateArchived, 10*time.Second)
				if runs.Load() != 0 || got.Retried != 1 {
					t.Fatalf("runs %d, Retried %d: want 0 and 1", runs.Load(), got.Retried)
				}
				_ = held.Release(ctx)
				return
			}
			eventually(t, 15*time.Second, "three busy attempts", func() bool { return busy.Load() >= 3 })
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}

			// Default asynq delays (15 s and more) would not fit in this wait.
			got := taskState(t, insp, info, asynq.TaskStateCompleted, 10*time.Second)
			if runs.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", runs.Load())
			}
			if retryCount.Load() != 0 || got.Retried != 0 {
				t.Fatalf("retry count in handler %d, Retried %d: want 0 (busy attempts must not count)", retryCount.Load(), got.Retried)
			}
			if n := len(errs.all()); int64(n) != busy.Load() {
				t.Fatalf("%d errors, %d of them busy: want only busy errors: %v", n, busy.Load(), errs.all())
			}
			t.Logf("busy attempts before the run: %d", busy.Load())
		})
	}
}

// WithBusy maps a busy lock to asynq's control-flow errors; WithWait queues first.
func TestBusyOptions(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	held, err := e.lock.Acquire(ctx, "account:1")
	if err != nil {
		t.Fatal(err)
	}
	task := asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`))
	ran := func(context.Context, *asynq.Task) error { t.Error("handler ran on a busy lock"); return nil }

	for _, tc := range []struct {
		name string
		opts []asynqlock.Option
		want error
	}{
		{"default", nil, nil},
		{"skip retry", []asynqlock.Option{asynqlock.WithBusy(asynq.SkipRetry)}, asynq.SkipRetry},
		{"revoke", []asynqlock.Option{asynqlock.WithBusy(asynq.RevokeTask)}, asynq.RevokeTask},
		{"bounded wait", []asynqlock.Option{asynqlock.WithWait(100 * time.Millisecond), asynqlock.WithRetryIn(3 * time.Second)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := asynqlock.Wrap(asynq.HandlerFunc(ran), e.lock, taskAccountKey, tc.opts...)
			err := h.ProcessTask(ctx, task)
			var le *asynqlock.ErrLocked
			if !errors.As(err, &le) || !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("err = %v, want an *ErrLocked matching dlock.ErrNotObtained", err)
			}
			if le.Key != "account:1" {
				t.Fatalf("ErrLocked.Key = %q", le.Key)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want it to match %v", err, tc.want)
			}
			if asynqlock.IsFailure(err) {
				t.Fatalf("IsFailure(%v) = true", err)
			}
		})
	}

	// A waiting task gets the lock when it is released within the wait.
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, taskAccountKey, asynqlock.WithWait(5*time.Second))
	release := time.AfterFunc(100*time.Millisecond, func() { _ = held.Release(context.Background()) })
	defer release.Stop()
	if err := h.ProcessTask(ctx, task); err != nil {
		t.Fatalf("waiting task: %v", err)
	}
}

func TestIsFailureAndRetryDelay(t *testing.T) {
	locked := &asynqlock.ErrLocked{Key: "account:1", RetryIn: 3 * time.Second}
	other := errors.New("boom")
	fallback := func(int, error, *asynq.Task) time.Duration { return time.Hour }
	for _, tc := range []struct {
		name      string
		err       error
		failure   bool
		delay     time.Duration
		withNilFn bool
	}{
		{"busy", locked, false, 3 * time.Second, false},
		{"busy wrapped", errors.Join(other, locked), false, 3 * time.Second, false},
		{"other", other, true, time.Hour, false},
		{"other default", other, true, 0, true},
		{"nil", nil, false, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := asynqlock.IsFailure(tc.err); got != tc.failure {
				t.Fatalf("IsFailure = %v, want %v", got, tc.failure)
			}
			task := asynq.NewTask("x", nil)
			if tc.withNilFn {
				if d := asynqlock.RetryDelay(nil)(0, tc.err, task); d < 15*time.Second {
					t.Fatalf("default delay %s, want asynq's (>= 15 s)", d)
				}
				return
			}
			if d := asynqlock.RetryDelay(fallback)(0, tc.err, task); d != tc.delay {
				t.Fatalf("delay %s, want %s", d, tc.delay)
			}
		})
	}
	if msg := locked.Error(); msg == "" || strings.Contains(msg, "account:1") {
		t.Fatalf("Error() = %q: want a message without the raw key", msg)
	}
	if !errors.Is(locked, dlock.ErrNotObtained) {
		t.Fatal("ErrLocked does not match dlock.ErrNotObtained")
	}
}

// A busy task that WithBusy archives or drops is not tried again, and its error, which asynq
// stores and hands to Config.ErrorHandler, says so: it names no retry delay, and RetryIn is 0
// (so RetryDelay would give the fallback's delay). A WithBusy error that lets asynq retry
// keeps RetryIn, WithRetryIn's d plus the jitter: in [d, 1.5d) by default.
func TestBusyWithoutRetryNamesNoDelay(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	held, err := e.lock.Acquire(ctx, "account:2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	errNoted := errors.New("noted busy")
	for _, tc := range []struct {
		name    string
		busy    error
		retryIn time.Duration
	}{
		{"revoke", asynq.RevokeTask, 0},
		{"skip retry", fmt.Errorf("archive it: %w", asynq.SkipRetry), 0},
		{"retried", errNoted, 2 * time.Second},
		{"default", nil, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []asynqlock.Option{asynqlock.WithRetryIn(2 * time.Second)}
			if tc.busy != nil {
				opts = append(opts, asynqlock.WithBusy(tc.busy))
			}
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				t.Error("handler ran on a busy lock")
				return nil
			}), e.lock, taskAccountKey, opts...)
			err := h.ProcessTask(ctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"2"}`)))
			var le *asynqlock.ErrLocked
			if !errors.As(err, &le) || (tc.busy != nil && !errors.Is(err, tc.busy)) {
				t.Fatalf("err = %v; want an *ErrLocked matching %v", err, tc.busy)
			}
			inRange := le.RetryIn == 0
			if tc.retryIn > 0 {
				inRange = le.RetryIn >= tc.retryIn && le.RetryIn < tc.retryIn*3/2
			}
			if !inRange || strings.Contains(err.Error(), "retry in") != (tc.retryIn > 0) {
				t.Fatalf("RetryIn %s, error %q; want RetryIn in [%s, 1.5 × that) and a retry delay named only when there is one", le.RetryIn, err, tc.retryIn)
			}
		})
	}
}
