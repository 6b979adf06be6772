package asynqlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

// A key function (keyfunc.From) that panics: asynq recovers the panic, and the asynqlock.lock
// span started before the key was derived still ends, as a failure with outcome panicked.
func TestTelemetryKeyFuncPanicEndsSpan(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	key := keyfunc.Join(keyfunc.From("acct", func(keyfunc.Source) (string, error) { panic("bad key func") }))
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, key, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	func() {
		defer func() { _ = recover() }() // as asynq's processor does
		_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{}`)))
	}()
	started, ended := len(o.Spans.Started()), o.Spans.Ended()
	if started != 1 || len(ended) != 1 {
		t.Fatalf("asynqlock.lock spans: %d started, %d ended: the span leaks when the key function panics", started, len(ended))
	}
	if out := oteltest.Attr(ended[0], "asynqlock.outcome"); out != asynqlock.OutcomePanicked || ended[0].Status().Code != codes.Error {
		t.Errorf("span outcome %q status %v, want %q and codes.Error", out, ended[0].Status().Code, asynqlock.OutcomePanicked)
	}
}

// A key function (keyfunc.From) that fails with an error of its own, or marks the input
// invalid by wrapping keyfunc.ErrInvalid: the span is a failure (outcome error, or invalid),
// and its status and events keep the function's error text, which may hold payload data,
// out; the task's error keeps it for asynq.
func TestTelemetryKeyFuncErrorKeptOffSpan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		outcome string
	}{
		{"own error", errors.New("no account for email bob@example.com"), asynqlock.OutcomeError},
		{"invalid input", fmt.Errorf("%w: no account for email bob@example.com", keyfunc.ErrInvalid), asynqlock.OutcomeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := oteltest.New(t)
			e := newEnv(t)
			key := keyfunc.Join(keyfunc.From("acct", func(keyfunc.Source) (string, error) { return "", tc.err }))
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
				e.lock, key, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
			err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{}`)))
			if err == nil || !strings.Contains(err.Error(), "bob@example.com") {
				t.Fatalf("task error %v, want the key function's error", err)
			}
			s := oneSpan(t, o)
			wantSpan(t, s, tc.outcome, codes.Error)
			if !strings.Contains(s.Status().Description, `"acct"`) && tc.outcome == asynqlock.OutcomeInvalid {
				t.Errorf("span status %q: want the part named", s.Status().Description)
			}
			texts := []string{s.Status().Description}
			for _, ev := range s.Events() {
				for _, a := range ev.Attributes {
					texts = append(texts, a.Value.Emit())
				}
			}
			for _, text := range texts {
				if strings.Contains(text, "bob@example.com") {
					t.Errorf("span carries the key function's error text: %q", text)
				}
			}
		})
	}
}

// A handler that panics held the lock until the deferred release: asynqlock.lock.hold has its
// sample, and the lock is free again.
func TestTelemetryHandlerPanicRecordsHold(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("boom") }),
		e.lock, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	func() {
		defer func() { _ = recover() }()
		_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"p1"}`)))
	}()
	ended := o.Spans.Ended()
	if len(ended) != 1 || ended[0].Status().Code != codes.Error {
		t.Fatalf("precondition: span ended with error: %d spans", len(ended))
	}
	if out := oteltest.Attr(ended[0], "asynqlock.outcome"); out != asynqlock.OutcomePanicked {
		t.Errorf("span outcome %q, want %q", out, asynqlock.OutcomePanicked)
	}
	if n := oteltest.Count(o.Histogram(t, "asynqlock.lock.hold")); n != 1 {
		t.Errorf("asynqlock.lock.hold has %d samples after a handler that held the lock and panicked, want 1", n)
	}
	again := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }), e.lock, taskAccountKey)
	if err := again.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"p1"}`))); err != nil {
		t.Fatalf("the next task on the account after a panicked handler: %v", err)
	}
}

// No hold sample when the lock was never obtained (busy, invalid); one wait sample each.
func TestTelemetryHoldOnlyWhenObtained(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	held, err := e.lock.Acquire(t.Context(), "account:zzbusy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	err = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"zzbusy"}`)))
	var locked *asynqlock.ErrLocked
	if !errors.As(err, &locked) {
		t.Fatalf("busy: %v", err)
	}
	_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`nope`)))
	if n := oteltest.Count(o.Histogram(t, "asynqlock.lock.hold")); n != 0 {
		t.Errorf("hold samples %d for tasks that never held the lock", n)
	}
	wait := o.Histogram(t, "asynqlock.lock.wait")
	if n := oteltest.Count(wait); n != 2 {
		t.Errorf("wait samples %d, want 2", n)
	}
	if got := wait.DataPoints[0].Bounds; !slices.Equal(got, dlock.WaitBuckets()) {
		t.Errorf("asynqlock.lock.wait bounds %v, want dlock's %v", got, dlock.WaitBuckets())
	}
}

// Holds are recorded in seconds with bounds below a second (the SDK's default bounds, 0, 5,
// 10, ..., suit milliseconds and would put every hold under 5 s in one bucket).
func TestTelemetryHoldBucketsInSeconds(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"b1"}`)))
	hist := o.Histogram(t, "asynqlock.lock.hold")
	if len(hist.DataPoints) == 0 {
		t.Fatal("no hold sample")
	}
	if b := hist.DataPoints[0].Bounds; len(b) < 2 || b[1] >= 1 {
		t.Errorf("asynqlock.lock.hold (unit s) bounds %v: every hold under %vs falls in one bucket", b, b[1])
	}
}

// A release that fails (Redis went away while the handler ran) leaves the lock held until its
// lease ends: the task keeps the handler's result, and the asynqlock.lock span, which covers
// the release, ends as a failure with outcome obtained.
func TestTelemetryReleaseFailureMarksSpan(t *testing.T) {
	o := oteltest.New(t)
	srv := redistest.Start(t)
	c := dlock.New(srv.Client(t, func(opt *redis.Options) { opt.MaxRetries = -1 }))
	t.Cleanup(func() { _ = c.Close() })
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return srv.Stop() }),
		c, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	if err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"r1"}`))); err != nil {
		t.Fatalf("the handler succeeded, yet the task returns %v", err)
	}
	ended := o.Spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	s := ended[0]
	if out := oteltest.Attr(s, "asynqlock.outcome"); out != asynqlock.OutcomeObtained {
		t.Errorf("span outcome %q, want %q", out, asynqlock.OutcomeObtained)
	}
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, "release failed") {
		t.Errorf("span status %v %q after a failed release, want codes.Error naming the release", s.Status().Code, s.Status().Description)
	}
}
