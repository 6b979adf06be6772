package oteltest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Recorder holds a test's providers and what they recorded.
type Recorder struct {
	Spans  *tracetest.SpanRecorder
	TP     *sdktrace.TracerProvider
	Reader *sdkmetric.ManualReader
	MP     *sdkmetric.MeterProvider
}

// New returns a Recorder whose providers are shut down at tb's cleanup.
func New(tb testing.TB) *Recorder {
	r := &Recorder{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	r.TP = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.Spans))
	r.MP = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.Reader))
	tb.Cleanup(func() {
		_ = r.TP.Shutdown(context.Background())
		_ = r.MP.Shutdown(context.Background())
	})
	return r
}

// Metrics collects the metrics recorded so far, by instrument name.
func (r *Recorder) Metrics(tb testing.TB) map[string]metricdata.Aggregation {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
	}
	m := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			m[x.Name] = x.Data
		}
	}
	return m
}

// Histogram is the named float histogram recorded so far (empty when there is none).
func (r *Recorder) Histogram(tb testing.TB, name string) metricdata.Histogram[float64] {
	tb.Helper()
	h, _ := r.Metrics(tb)[name].(metricdata.Histogram[float64])
	return h
}

// Sum adds up the data points of an int64 counter (0 when a is not one).
func Sum(a metricdata.Aggregation) int64 {
	s, _ := a.(metricdata.Sum[int64])
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

// CounterByAttr adds up the data points of the named int64 counter by the value of attribute
// key (as text); a data point without the attribute counts under "".
func (r *Recorder) CounterByAttr(tb testing.TB, name string, key attribute.Key) map[string]int64 {
	tb.Helper()
	s, _ := r.Metrics(tb)[name].(metricdata.Sum[int64])
	counts := map[string]int64{}
	for _, dp := range s.DataPoints {
		v, _ := dp.Attributes.Value(key)
		counts[v.Emit()] += dp.Value
	}
	return counts
}

// Count adds up the samples of a histogram.
func Count(h metricdata.Histogram[float64]) uint64 {
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}

// Attr is the value of span attribute key as text (a bool as "true" or "false"), "" when the
// span has none.
func Attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == key {
			return a.Value.Emit()
		}
	}
	return ""
}
