// Package oteltest records the spans and metrics of a test in memory: an SDK tracer provider
// feeding a span recorder and a meter provider read by a manual reader, both shut down at
// the test's cleanup. Tests pass TP and MP to WithTracerProvider / WithMeterProvider and
// read what was recorded with Spans, Metrics and the small helpers.
//
// It is for tests only; it guarantees nothing beyond what the OpenTelemetry SDK records.
package oteltest
