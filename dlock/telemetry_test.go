package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockguard/lockguard/dlock"
)

func TestTelemetry(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	srv, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithTracerProvider(tp), dlock.WithMeterProvider(mp), dlock.WithLease(time.Second))
	ctx := testContext(t, 10*time.Second)
	key := "secret-user-42:" + uniqueKey(t)

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, _ = c.Acquire(wctx, key)
	cancel()
	// Lose the lock: the lost counter must count it.
	if err := rdb.Del(ctx, lockKeyOf(t, rdb, strings.ReplaceAll(key, "%", "%25"))).Err(); err != nil {
		t.Fatal(err)
	}
	<-lk.Done()
	_ = srv.Stop()
	_, _ = c.TryAcquire(ctx, key+"-down")

	got := map[string]int{}
	for _, s := range spans.Ended() {
		if s.Name() != "dlock.acquire" {
			t.Errorf("span name %q", s.Name())
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, a := range s.Attributes() {
			attrs[a.Key] = a.Value
			if strings.Contains(a.Value.String(), "secret-user-42") {
				t.Errorf("raw key in span attribute %s", a.Key)
			}
		}
		if attrs["dlock.key_hash"].AsString() == "" {
			t.Error("span without dlock.key_hash")
		}
		out := attrs["dlock.outcome"].AsString()
		got[out]++
		if (s.Status().Code == codes.Error) != (out == dlock.OutcomeError) {
			t.Errorf("outcome %s with span status %v: only real failures are errors", out, s.Status().Code)
		}
	}
	for _, want := range []string{dlock.OutcomeObtained, dlock.OutcomeBusy, dlock.OutcomeTimeout, dlock.OutcomeError} {
		if got[want] != 1 {
			t.Errorf("outcome %s recorded %d times, want 1 (all: %v)", want, got[want], got)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	metrics := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlock.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			metrics[m.Name] = m.Data
		}
	}
	if h, ok := metrics["dlock.acquire.wait"].(metricdata.Histogram[float64]); !ok || len(h.DataPoints) < 4 {
		t.Errorf("wait histogram: %#v", metrics["dlock.acquire.wait"])
	}
	if s, ok := metrics["dlock.locks.lost"].(metricdata.Sum[int64]); !ok || len(s.DataPoints) != 1 || s.DataPoints[0].Value != 1 {
		t.Errorf("lost counter: %#v", metrics["dlock.locks.lost"])
	}
	if s, ok := metrics["dlock.locks.held"].(metricdata.Sum[int64]); !ok || len(s.DataPoints) != 1 || s.DataPoints[0].Value != 0 {
		t.Errorf("held gauge after the loss: %#v", metrics["dlock.locks.held"])
	}
}
