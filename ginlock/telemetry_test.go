package ginlock_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockguard/lockguard/ginlock"
)

func TestTelemetry(t *testing.T) {
	e := setup(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithTracerProvider(tp), ginlock.WithMeterProvider(mp)),
		func(c *gin.Context) { c.Status(http.StatusCreated) })
	key := idemKey(t)
	do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":1}`}) // obtained
	do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":1}`}) // replayed
	do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":2}`}) // mismatch
	do(r, req{path: "/payments", user: "alice"})                            // invalid: no span

	var outcomes []string
	for _, s := range spans.Ended() {
		if s.Name() != "ginlock.lock" {
			continue
		}
		if s.InstrumentationScope().Name != ginlock.ScopeName {
			t.Errorf("scope %q", s.InstrumentationScope().Name)
		}
		attrs := attribute.NewSet(s.Attributes()...)
		out, _ := attrs.Value("ginlock.outcome")
		outcomes = append(outcomes, out.AsString())
		hash, ok := attrs.Value("ginlock.key_hash")
		if !ok || hash.AsString() == "" {
			t.Errorf("span without ginlock.key_hash: %v", s.Attributes())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), key) {
				t.Errorf("span attribute %s holds the raw key", kv.Key)
			}
		}
	}
	if got := strings.Join(outcomes, ","); got != "obtained,replayed,mismatch" {
		t.Fatalf("span outcomes %s, want obtained,replayed,mismatch", got)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "ginlock.requests" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				out, _ := dp.Attributes.Value("ginlock.outcome")
				counts[out.AsString()] += dp.Value
			}
		}
	}
	for _, out := range []string{ginlock.OutcomeObtained, ginlock.OutcomeReplayed, ginlock.OutcomeMismatch, ginlock.OutcomeInvalid} {
		if counts[out] != 1 {
			t.Errorf("ginlock.requests{outcome=%s} = %d, want 1 (all: %v)", out, counts[out], counts)
		}
	}
}
