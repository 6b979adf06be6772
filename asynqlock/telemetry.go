package asynqlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// errKeyFunc marks the span of a task whose key function failed; the function's own error,
// which may hold payload data, is not put on the span.
var errKeyFunc = errors.New("asynqlock: key function failed")

// invalidKeyError is what the span of a task with invalid key input says: the part and the
// keyfunc sentinel, not the error's text, which a From function may have filled with payload
// data (wrapping keyfunc.ErrInvalid).
func invalidKeyError(err error) error {
	what := "invalid input"
	for _, sentinel := range []error{keyfunc.ErrMissing, keyfunc.ErrInvalid, keyfunc.ErrTooLong, keyfunc.ErrMalformedBody, keyfunc.ErrBodyTooLarge} {
		if errors.Is(err, sentinel) {
			what = sentinel.Error()
			break
		}
	}
	var pe *keyfunc.PartError
	if errors.As(err, &pe) {
		return fmt.Errorf("asynqlock: lock key cannot be derived: part %q: %s", pe.Part, what)
	}
	return fmt.Errorf("asynqlock: lock key cannot be derived: %s", what)
}

// ScopeName is the instrumentation scope of the package's tracer and meter.
const ScopeName = "github.com/lockguard/lockguard/asynqlock"

// Outcomes of a task passing through the middleware, as the asynqlock.outcome attribute of
// the asynqlock.lock span and of the asynqlock.tasks counter.
const (
	OutcomeObtained    = "obtained"    // the lock was taken and the handler ran
	OutcomeBusy        = "busy"        // the lock was held elsewhere; the handler did not run
	OutcomeReplayed    = "replayed"    // a done marker exists; acknowledged without running
	OutcomeInvalid     = "invalid"     // no key could be derived; archived (asynq.SkipRetry)
	OutcomeUnavailable = "unavailable" // Redis could not be reached; retried by asynq
	OutcomeLost        = "lost"        // the lock was lost while the handler ran
	OutcomeCanceled    = "canceled"    // the task's own context ended the wait for the lock (or the hold it re-entered was being released); asynq retries it
	OutcomeError       = "error"       // another failure to lock (a From function's error, a closed Client)
	OutcomePanicked    = "panicked"    // the key function or the handler panicked; asynq reports it
)

// holdBuckets are the hold histogram's bounds in seconds. The SDK's defaults (0, 5, 10, 25,
// ...) suit milliseconds and would put most holds in one bucket; a hold lasts as long as the
// handler, which for a task may be an hour. Waits use dlock's bounds (dlock.WaitBuckets).
var holdBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}

type telemetry struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	tasks  metric.Int64Counter
	wait   metric.Float64Histogram
	hold   metric.Float64Histogram
}

func newTelemetry(c *config) *telemetry {
	tp, mp, prop := c.tracerProvider, c.meterProvider, c.propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{tracer: tp.Tracer(ScopeName), prop: prop}
	m := mp.Meter(ScopeName)
	// Instrument errors only happen for invalid names; a nil instrument is skipped.
	var err error
	if t.tasks, err = m.Int64Counter("asynqlock.tasks", metric.WithUnit("{task}"),
		metric.WithDescription("Tasks that passed through the middleware, by outcome.")); err != nil {
		otel.Handle(err)
	}
	if t.wait, err = m.Float64Histogram("asynqlock.lock.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of a task to the outcome of its lock."),
		metric.WithExplicitBucketBoundaries(dlock.WaitBuckets()...)); err != nil {
		otel.Handle(err)
	}
	if t.hold, err = m.Float64Histogram("asynqlock.lock.hold", metric.WithUnit("s"),
		metric.WithDescription("Time the lock was held while the handler ran."),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		otel.Handle(err)
	}
	return t
}

func (t *telemetry) propagator() propagation.TextMapPropagator {
	if t.prop != nil {
		return t.prop
	}
	return otel.GetTextMapPropagator()
}

// taskSpan is the asynqlock.lock span of one task: from the start of the lock wait to the
// release, so the handler's own spans are its children.
type taskSpan struct {
	t        *telemetry
	ctx      context.Context
	span     trace.Span
	taskType attribute.KeyValue
	start    time.Time
	locked   time.Time // when the lock was obtained; zero when it was not
	ended    bool
}

func (t *telemetry) start(ctx context.Context, taskType string) (context.Context, *taskSpan) {
	ctx, span := t.tracer.Start(ctx, "asynqlock.lock", trace.WithSpanKind(trace.SpanKindInternal))
	ts := &taskSpan{t: t, ctx: ctx, span: span, taskType: attribute.String("asynqlock.task_type", taskType), start: time.Now()}
	if span.IsRecording() {
		span.SetAttributes(ts.taskType)
	}
	return ctx, ts
}

func (s *taskSpan) key(key string) {
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.String("asynqlock.key_hash", dlock.KeyHash(key)))
	}
}

// waited records the outcome of the lock wait.
func (s *taskSpan) waited(outcome string) {
	now := time.Now()
	if outcome == OutcomeObtained {
		s.locked = now
	}
	waited := now.Sub(s.start).Seconds()
	if s.t.wait != nil {
		s.t.wait.Record(s.ctx, waited, metric.WithAttributes(attribute.String("asynqlock.outcome", outcome)))
	}
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.Float64("asynqlock.wait_seconds", waited))
	}
}

// revoked notes that the task returns asynq.RevokeTask from its handler: asynq drops it, which
// is no failure, so dashboards tell it apart by this attribute and not by an error status.
func (s *taskSpan) revoked() {
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.Bool("asynqlock.revoked", true))
	}
}

// end closes the span with the final outcome; err, when set, is a real failure. The hold
// time is recorded whenever the lock was obtained, whatever became of the handler.
func (s *taskSpan) end(outcome string, err error) {
	s.ended = true
	attr := attribute.String("asynqlock.outcome", outcome)
	if s.t.tasks != nil {
		s.t.tasks.Add(s.ctx, 1, metric.WithAttributes(attr, s.taskType))
	}
	if !s.locked.IsZero() && s.t.hold != nil {
		s.t.hold.Record(s.ctx, time.Since(s.locked).Seconds(), metric.WithAttributes(attr))
	}
	if s.span.IsRecording() {
		s.span.SetAttributes(attr)
		if err != nil {
			s.span.RecordError(err)
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.span.End()
}
