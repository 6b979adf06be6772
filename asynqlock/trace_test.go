package asynqlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A task made with NewTask in a request's span gets an asynqlock.lock span that is a child
// of the request's span, and the handler runs inside it.
func TestTraceFromEnqueuerToTask(t *testing.T) {
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	e := newEnv(t)
	handlerSpan := make(chan trace.SpanContext, 1)
	mux := asynq.NewServeMux()
	mux.Use(asynqlock.New(e.lock, taskAccountKey, asynqlock.WithTracerProvider(tp)))
	mux.HandleFunc("account:deduct", func(ctx context.Context, _ *asynq.Task) error {
		handlerSpan <- trace.SpanContextFromContext(ctx)
		return nil
	})
	e.startServer(t, serverConfig(2), mux)

	reqCtx, reqSpan := tp.Tracer("test").Start(t.Context(), "POST /accounts/:id/deduct")
	e.enqueue(t, e.client(t), asynqlock.NewTask(reqCtx, "account:deduct", []byte(`{"account_id":"3"}`)))
	reqSpan.End()

	var inHandler trace.SpanContext
	select {
	case inHandler = <-handlerSpan:
	case <-time.After(10 * time.Second):
		t.Fatal("task did not run")
	}
	var lockSpan sdktrace.ReadOnlySpan
	eventually(t, 5*time.Second, "the asynqlock.lock span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "asynqlock.lock" {
				lockSpan = s
				return true
			}
		}
		return false
	})
	if lockSpan.Parent().SpanID() != reqSpan.SpanContext().SpanID() || lockSpan.SpanContext().TraceID() != reqSpan.SpanContext().TraceID() {
		t.Fatalf("lock span parent %s, want the request span %s", lockSpan.Parent().SpanID(), reqSpan.SpanContext().SpanID())
	}
	if inHandler.SpanID() != lockSpan.SpanContext().SpanID() {
		t.Fatal("handler does not run inside the lock span")
	}
	if lockSpan.InstrumentationScope().Name != asynqlock.ScopeName {
		t.Fatalf("scope %q", lockSpan.InstrumentationScope().Name)
	}
	attrs := attrMap(lockSpan.Attributes())
	key, err := taskAccountKey.Key(&keyfunc.MapSource{Payload: []byte(`{"account_id":"3"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if attrs["asynqlock.outcome"] != asynqlock.OutcomeObtained || attrs["asynqlock.key_hash"] != dlock.KeyHash(key) {
		t.Fatalf("attributes %v: want outcome obtained and key_hash %s (dlock.KeyHash of the key)", attrs, dlock.KeyHash(key))
	}
}

// Outcomes that are not failures leave the span status unset; failures set codes.Error.
func TestSpanOutcomes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newEnv(t)
	held, err := e.lock.Acquire(t.Context(), "account:busy")
	if err != nil {
		t.Fatal(err)
	}

	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
		e.lock, taskAccountKey, asynqlock.WithTracerProvider(tp))
	for _, tc := range []struct {
		payload string
		outcome string
		status  codes.Code
	}{
		{`{"account_id":"busy"}`, asynqlock.OutcomeBusy, codes.Unset},
		{`{"account_id":"free"}`, asynqlock.OutcomeObtained, codes.Unset},
		{`not json`, asynqlock.OutcomeInvalid, codes.Error},
	} {
		_ = h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(tc.payload)))
		spans := rec.Ended()
		s := spans[len(spans)-1]
		if got := attrMap(s.Attributes())["asynqlock.outcome"]; got != tc.outcome || s.Status().Code != tc.status {
			t.Errorf("%s: outcome %q status %v, want %q %v", tc.payload, got, s.Status().Code, tc.outcome, tc.status)
		}
	}
	if err := held.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}
