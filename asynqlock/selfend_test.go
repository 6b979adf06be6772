package asynqlock_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/keyfunc"
)

// A handler may end its hold itself, with Complete or Release on the lock FromContext gives
// it, as dlock allows: the middleware then has nothing to free or record. It logs no
// warning, its span is no failure, the lock is free, and a record the handler stored with
// Complete is what later duplicates are acknowledged by.
func TestHandlerEndsItsOwnHold(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(ctx context.Context) error
		done bool // WithDoneMarker
	}{
		{"complete", func(ctx context.Context) error {
			lk, _ := asynqlock.FromContext(ctx)
			return lk.Complete(ctx, []byte("charge ch_1"), time.Hour)
		}, true},
		{"release with done marker", func(ctx context.Context) error {
			lk, _ := asynqlock.FromContext(ctx)
			return lk.Release(ctx)
		}, true},
		{"release", func(ctx context.Context) error {
			lk, _ := asynqlock.FromContext(ctx)
			return lk.Release(ctx)
		}, false},
		{"release then fail", func(ctx context.Context) error {
			lk, _ := asynqlock.FromContext(ctx)
			if err := lk.Release(ctx); err != nil {
				return err
			}
			return errors.New("gateway said no")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := oteltest.New(t)
			e := newEnv(t)
			var logs locktest.LogBuffer
			opts := []asynqlock.Option{
				asynqlock.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))),
				asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP),
			}
			if tc.done {
				opts = append(opts, asynqlock.WithDoneMarker(time.Hour))
			}
			runs := 0
			key := keyfunc.Join(keyfunc.Const("payment"), keyfunc.JSON("payment_id"))
			h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				runs++
				return tc.end(ctx)
			}), e.lock, key, opts...)
			task := asynq.NewTask("payment:capture", []byte(`{"payment_id":"p1"}`))

			herr := h.ProcessTask(t.Context(), task)
			if tc.name == "release then fail" {
				if herr == nil || herr.Error() != "gateway said no" {
					t.Fatalf("task error %v, want the handler's own", herr)
				}
			} else if herr != nil {
				t.Fatalf("task error %v, want none", herr)
			}
			if logs.String() != "" {
				t.Errorf("the middleware logged, want nothing above debug:\n%s", logs.String())
			}
			wantCode := codes.Unset
			if herr != nil {
				wantCode = codes.Error
			}
			wantSpan(t, oneSpan(t, o), asynqlock.OutcomeObtained, wantCode)
			lk, err := e.lock.TryAcquire(t.Context(), "payment:p1")
			if err != nil {
				t.Fatalf("lock after the task: %v, want it free", err)
			}
			_ = lk.Release(t.Context())

			// A duplicate: acknowledged by the handler's own record, or run again when the
			// handler stored none.
			if err := h.ProcessTask(t.Context(), task); err != nil && tc.name != "release then fail" {
				t.Fatalf("duplicate: %v", err)
			}
			wantRuns := 2
			if tc.name == "complete" {
				wantRuns = 1
				rec, ok, err := e.lock.Completed(t.Context(), "payment:p1")
				if err != nil || !ok || string(rec) != "charge ch_1" {
					t.Errorf("record %q %v %v, want the handler's", rec, ok, err)
				}
			}
			if runs != wantRuns {
				t.Errorf("handler ran %d times, want %d", runs, wantRuns)
			}
		})
	}
}
