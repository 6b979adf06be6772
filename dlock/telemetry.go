package dlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the package's tracer and meter.
const ScopeName = "github.com/lockguard/lockguard/dlock"

// Outcomes of an acquisition, as the dlock.outcome attribute. Timeout is a wait whose
// deadline passed (the caller's, or WithMaxWait); Canceled one whose context was cancelled
// (the caller gave up, a client went away, a worker shut down).
const (
	OutcomeObtained  = "obtained"
	OutcomeBusy      = "busy"
	OutcomeTimeout   = "timeout"
	OutcomeCanceled  = "canceled"
	OutcomeCompleted = "completed"
	OutcomeError     = "error"
)

// How a hold ended, as the dlock.end attribute of the hold histogram (dlock.lock.hold) and of
// the lost counter (dlock.locks.lost, which counts the last three).
const (
	EndReleased = "released" // released (or completed) by its holder
	EndExpired  = "expired"  // its lease ran out on the holder's clock before it was renewed
	EndTaken    = "taken"    // Redis had it gone or another owner's when the holder looked
	EndClosed   = "closed"   // Client.Close ended it while held
)

type telemetry struct {
	tracer   trace.Tracer
	wait     metric.Float64Histogram
	hold     metric.Float64Histogram
	held     metric.Int64UpDownCounter
	lost     metric.Int64Counter
	renewals metric.Int64Counter
}

func newTelemetry(cfg *config) *telemetry {
	tp, mp := cfg.tracerProvider, cfg.meterProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &telemetry{tracer: tp.Tracer(ScopeName)}
	// Instrument errors only happen for invalid names; a nil-safe no-op keeps locking working.
	var err error
	if t.wait, err = m.Float64Histogram("dlock.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("Time from the start of an acquisition to its outcome."),
		metric.WithExplicitBucketBoundaries(waitBuckets...)); err != nil {
		otel.Handle(err)
	}
	if t.hold, err = m.Float64Histogram("dlock.lock.hold", metric.WithUnit("s"),
		metric.WithDescription("Time from obtaining a lock to the end of its last hold."),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		otel.Handle(err)
	}
	if t.held, err = m.Int64UpDownCounter("dlock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases currently held by this process.")); err != nil {
		otel.Handle(err)
	}
	if t.lost, err = m.Int64Counter("dlock.locks.lost", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases lost while held.")); err != nil {
		otel.Handle(err)
	}
	if t.renewals, err = m.Int64Counter("dlock.locks.renewed", metric.WithUnit("{lock}"),
		metric.WithDescription("Leases the watchdog renewed in Redis.")); err != nil {
		otel.Handle(err)
	}
	return t
}

// waitBuckets are the bounds, in seconds, of the wait histogram: from a lock taken at once
// (a round trip, well under a millisecond) to waits of a minute. The SDK's default bounds
// (0, 5, 10, 25, ...) suit milliseconds and would put every wait under 5 s in one bucket.
var waitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// holdBuckets are the bounds, in seconds, of the hold histogram: the wait bounds, then on to
// an hour, for batch work held for minutes.
var holdBuckets = append(slices.Clone(waitBuckets), 120, 300, 600, 1800, 3600)

// WaitBuckets returns the bucket bounds, in seconds, of dlock's wait histogram
// (dlock.acquire.wait), from half a millisecond to a minute. Integrations that record waits of
// their own use them, so their histograms line up with dlock's. The slice is a copy.
func WaitBuckets() []float64 { return slices.Clone(waitBuckets) }

// KeyHash is a lock key as dlock, ginlock and asynqlock show it in spans, logs and error
// texts, which never hold the raw key (keys may hold user data): the first 8 bytes of its
// SHA-256, in hex. Compute it to find a key's lock in those.
func KeyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// spanInternal is built once: options are allocated on every call otherwise.
var spanInternal = trace.WithSpanKind(trace.SpanKindInternal)

type acquireSpan struct {
	span  trace.Span
	start time.Time
}

// reentry marks the span of an acquisition that re-entered a lock its context carries.
func (s acquireSpan) reentry() {
	if s.span.IsRecording() {
		s.span.SetAttributes(attribute.Bool("dlock.reentry", true))
	}
}

func (t *telemetry) startAcquire(ctx context.Context, key string, wait bool) (context.Context, acquireSpan) {
	ctx, span := t.tracer.Start(ctx, "dlock.acquire", spanInternal)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("dlock.key_hash", KeyHash(key)), attribute.Bool("dlock.wait", wait))
	}
	return ctx, acquireSpan{span: span, start: time.Now()}
}

func outcome(err error) string {
	if err == nil {
		return OutcomeObtained
	}
	var ce *CompletedError
	switch {
	case errors.As(err, &ce):
		return OutcomeCompleted
	case errors.Is(err, ErrUnavailable):
		// Before the context's error: a wait that ended while Redis did not answer matches
		// both, and it is the store that failed.
		return OutcomeError
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, ErrNotObtained):
		return OutcomeBusy
	}
	return OutcomeError
}

// outcomeOpts holds the wait histogram's options for each outcome, built once:
// metric.WithAttributes would build and sort a set on every acquisition, and a list of
// options passed one by one is a new slice on every call.
var outcomeOpts = func() map[string][]metric.RecordOption {
	m := map[string][]metric.RecordOption{}
	for _, o := range []string{OutcomeObtained, OutcomeBusy, OutcomeTimeout, OutcomeCanceled, OutcomeCompleted, OutcomeError} {
		m[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("dlock.outcome", o)))}
	}
	return m
}()

// endOpts holds the options of the hold histogram and the lost counter for each way a hold
// ends, built once (see outcomeOpts).
var endOpts = func() map[string]endOptions {
	m := map[string]endOptions{}
	for _, e := range []string{EndReleased, EndExpired, EndTaken, EndClosed} {
		o := metric.WithAttributeSet(attribute.NewSet(attribute.String("dlock.end", e)))
		m[e] = endOptions{record: []metric.RecordOption{o}, add: []metric.AddOption{o}}
	}
	return m
}()

type endOptions struct {
	record []metric.RecordOption
	add    []metric.AddOption
}

// endOf is how a lease that ended with cause ended (see end): EndReleased after its last
// release, the lost error's own cause, EndClosed when Close came as it was obtained. end is
// given lost's error as it is (errors.As would put a variable on the heap at every release).
func endOf(cause error) string {
	if le, ok := cause.(*lostError); ok {
		return le.cause
	}
	if cause == ErrClosed {
		return EndClosed
	}
	return EndReleased
}

func (t *telemetry) endAcquire(ctx context.Context, s acquireSpan, g grant, err error) {
	waited := time.Since(s.start).Seconds()
	out := outcome(err)
	attr := attribute.String("dlock.outcome", out)
	if t.wait != nil {
		t.wait.Record(ctx, waited, outcomeOpts[out]...)
	}
	if s.span.IsRecording() {
		s.span.SetAttributes(attr, attribute.Float64("dlock.wait_seconds", waited),
			attribute.Int("dlock.attempts", g.attempts), attribute.Bool("dlock.handed_off", g.handedOff))
		if out == OutcomeError {
			s.span.RecordError(err)
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.span.End()
}

func (t *telemetry) started(*lease) {
	if t.held != nil {
		t.held.Add(context.Background(), 1)
	}
}

func (t *telemetry) ended(l *lease, cause error) {
	ctx := context.Background()
	if t.held != nil {
		t.held.Add(ctx, -1)
	}
	end := endOf(cause)
	if t.hold != nil {
		t.hold.Record(ctx, time.Since(l.since).Seconds(), endOpts[end].record...)
	}
	if errors.Is(cause, ErrLockLost) && t.lost != nil {
		t.lost.Add(ctx, 1, endOpts[end].add...)
	}
}

func (t *telemetry) renewed(n int) {
	if t.renewals != nil {
		t.renewals.Add(context.Background(), int64(n))
	}
}
