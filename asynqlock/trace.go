package asynqlock

import (
	"context"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InjectTrace writes the trace context of ctx into headers (with the global propagator,
// otel.GetTextMapPropagator()), for asynq.NewTaskWithHeaders. headers must not be nil.
func InjectTrace(ctx context.Context, headers map[string]string) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(headers))
}

// ExtractTrace returns ctx carrying the trace context found in the task's headers (with the
// global propagator), so work done for the task joins the trace of the request that
// enqueued it. The middleware does this itself when ctx has no span yet.
func ExtractTrace(ctx context.Context, task *asynq.Task) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(task.Headers()))
}

// NewTask is asynq.NewTaskWithHeaders with the trace context of ctx in the headers: enqueue
// it from an HTTP handler and the task's asynqlock.lock span becomes a child of the request's
// span.
func NewTask(ctx context.Context, typename string, payload []byte, opts ...asynq.Option) *asynq.Task {
	headers := make(map[string]string)
	InjectTrace(ctx, headers)
	return asynq.NewTaskWithHeaders(typename, payload, headers, opts...)
}

// extract joins the enqueuer's trace unless an outer middleware already started a span.
func (t *telemetry) extract(ctx context.Context, task *asynq.Task) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() || len(task.Headers()) == 0 {
		return ctx
	}
	return t.propagator().Extract(ctx, propagation.MapCarrier(task.Headers()))
}
