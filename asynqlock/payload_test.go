package asynqlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/keyfunc"
)

// WithMaxPayload caps what a key function may read: a larger payload is invalid input,
// archived without running, when the key reads it, and no concern when it does not;
// n <= 0 removes the cap, and the default is DefaultMaxPayload.
func TestMaxPayload(t *testing.T) {
	e := newEnv(t)
	payload := func(n int) []byte {
		return []byte(`{"account_id":"7","pad":"` + strings.Repeat("x", max(n-27, 0)) + `"}`)
	}
	typeKey := keyfunc.Join(keyfunc.Meta(keyfunc.MetaTaskType))
	for _, tc := range []struct {
		name    string
		key     *keyfunc.Func
		opts    []asynqlock.Option
		size    int
		tooLong bool
	}{
		{"over the cap", taskAccountKey, []asynqlock.Option{asynqlock.WithMaxPayload(64)}, 65, true},
		{"at the cap", taskAccountKey, []asynqlock.Option{asynqlock.WithMaxPayload(64)}, 64, false},
		{"key does not read the payload", typeKey, []asynqlock.Option{asynqlock.WithMaxPayload(64)}, 1000, false},
		{"no cap", taskAccountKey, []asynqlock.Option{asynqlock.WithMaxPayload(0)}, asynqlock.DefaultMaxPayload + 1, false},
		{"default cap", taskAccountKey, nil, asynqlock.DefaultMaxPayload + 1, true},
		{"under the default cap", taskAccountKey, nil, asynqlock.DefaultMaxPayload, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := payload(tc.size)
			if len(p) != tc.size {
				t.Fatalf("payload of %d bytes, want %d", len(p), tc.size)
			}
			ran := false
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }),
				e.lock, tc.key, tc.opts...)
			err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", p))
			if tc.tooLong {
				if !errors.Is(err, keyfunc.ErrBodyTooLarge) || !errors.Is(err, asynq.SkipRetry) || ran {
					t.Fatalf("err = %v, ran %v; want asynq.SkipRetry wrapping keyfunc.ErrBodyTooLarge, not run", err, ran)
				}
				return
			}
			if err != nil || !ran {
				t.Fatalf("err = %v, ran %v; want the handler run", err, ran)
			}
		})
	}
}

// WithPropagator is the propagator the middleware reads the enqueuer's trace context with:
// a task whose headers were written with it joins that trace while the global propagator
// knows no format (the control case shows the test can fail).
func TestWithPropagator(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) // reads nothing
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	e := newEnv(t)

	for _, tc := range []struct {
		name   string
		opts   []asynqlock.Option
		joined bool
	}{
		{"with propagator", []asynqlock.Option{asynqlock.WithPropagator(propagation.TraceContext{})}, true},
		{"global propagator", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := oteltest.New(t)
			reqCtx, req := o.TP.Tracer("test").Start(t.Context(), "enqueue")
			headers := map[string]string{}
			propagation.TraceContext{}.Inject(reqCtx, propagation.MapCarrier(headers))
			req.End()
			var inHandler trace.SpanContext
			h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
				inHandler = trace.SpanContextFromContext(ctx)
				return nil
			}), e.lock, taskAccountKey, append(tc.opts, asynqlock.WithTracerProvider(o.TP))...)
			if err := h.ProcessTask(t.Context(), asynq.NewTaskWithHeaders("account:deduct", []byte(`{"account_id":"5"}`), headers)); err != nil {
				t.Fatal(err)
			}
			joined := inHandler.TraceID() == req.SpanContext().TraceID()
			if joined != tc.joined {
				t.Fatalf("task span in the enqueuer's trace: %v, want %v", joined, tc.joined)
			}
		})
	}
}
