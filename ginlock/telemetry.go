package ginlock

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockguard/lockguard/dlock"
)

// ScopeName is the instrumentation scope of the package's tracer and meter.
const ScopeName = "github.com/lockguard/lockguard/ginlock"

// Outcomes of a request, as the ginlock.outcome attribute of the ginlock.lock span and of
// the ginlock.requests counter. Skipped requests are not counted.
const (
	OutcomeObtained    = "obtained"    // the lock was taken; the handler ran
	OutcomeBusy        = "busy"        // the lock was held (after the wait, if any): 409
	OutcomeCanceled    = "canceled"    // the client went away while the request waited for the lock (not a deadline: busy), or the request had ended before the lock answered (503)
	OutcomeReplayed    = "replayed"    // a stored response was replayed
	OutcomeMismatch    = "mismatch"    // a stored response exists for another fingerprint: 422
	OutcomeUnavailable = "unavailable" // the lock store failed: 503, or the handler ran (fail-open)
	OutcomeInvalid     = "invalid"     // the key could not be derived: 400 or 413
	OutcomeError       = "error"       // a configuration or stored-data error: 500
)

type telemetry struct {
	tracer   trace.Tracer
	requests metric.Int64Counter
}

func newTelemetry(cfg *config) *telemetry {
	tp, mp := cfg.tp, cfg.mp
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t := &telemetry{tracer: tp.Tracer(ScopeName)}
	var err error
	if t.requests, err = mp.Meter(ScopeName).Int64Counter("ginlock.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests seen by the middleware, by outcome.")); err != nil {
		otel.Handle(err) // only for invalid names; the nil counter is skipped below
	}
	return t
}

// spanInternal is built once: the option is allocated on every call otherwise.
var spanInternal = trace.WithSpanKind(trace.SpanKindInternal)

// start opens the ginlock.lock span around the key lookup and lock wait; key is "" when the
// key function failed, and the span then has no key_hash.
func (t *telemetry) start(ctx context.Context, route, key string) (context.Context, trace.Span) {
	ctx, span := t.tracer.Start(ctx, "ginlock.lock", spanInternal)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.route", route))
		if key != "" {
			span.SetAttributes(attribute.String("ginlock.key_hash", dlock.KeyHash(key)))
		}
	}
	return ctx, span
}

// errKeyFunc marks the span of a request whose key function failed; the function's own error
// goes to the log, not to the trace.
var errKeyFunc = errors.New("ginlock: key function failed")

// end ends span (when not nil) with outcome and counts the request. err marks the span as
// failed; busy, mismatch and invalid requests are outcomes, not errors. Attributes are only
// built for a counter or span that takes them: without an SDK, ending costs no allocation.
func (t *telemetry) end(ctx context.Context, span trace.Span, route, outcome string, failOpen bool, err error) {
	if t.requests != nil && t.requests.Enabled(ctx) {
		attrs := []attribute.KeyValue{attribute.String("ginlock.outcome", outcome), attribute.String("http.route", route)}
		if failOpen {
			attrs = append(attrs, attribute.Bool("ginlock.fail_open", true))
		}
		t.requests.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
	if span == nil {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("ginlock.outcome", outcome))
		if failOpen {
			span.SetAttributes(attribute.Bool("ginlock.fail_open", true))
		}
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
