package ginlock

import (
	"context"
	"errors"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Without an SDK (no-op providers), counting a request and ending its span allocate nothing:
// the attributes are built only for a counter or span that takes them.
func TestTelemetryEndWithoutSDKAllocatesNothing(t *testing.T) {
	tel := newTelemetry(&config{tp: tracenoop.NewTracerProvider(), mp: metricnoop.NewMeterProvider()})
	ctx, span := tel.start(context.Background(), "/payments", "k")
	err := errors.New("store down")
	allocs := testing.AllocsPerRun(100, func() {
		tel.end(ctx, span, "/payments", OutcomeUnavailable, true, err)
		tel.end(ctx, nil, "/payments", OutcomeObtained, false, nil)
	})
	if allocs != 0 {
		t.Errorf("end allocated %.1f times per call pair without an SDK; want 0", allocs)
	}
}
