package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/redis/go-redis/v9"
)

// holdsByEnd sums the hold histogram's samples and seconds by dlock.end.
func holdsByEnd(t *testing.T, o *oteltest.Recorder) (count map[string]uint64, seconds map[string]float64) {
	t.Helper()
	count, seconds = map[string]uint64{}, map[string]float64{}
	for _, dp := range o.Histogram(t, "dlock.lock.hold").DataPoints {
		v, _ := dp.Attributes.Value("dlock.end")
		count[v.Emit()] += dp.Count
		seconds[v.Emit()] += dp.Sum
	}
	return count, seconds
}

// recordedClient is a Client on a new Redis whose telemetry o records, with a test context.
func recordedClient(t *testing.T) (*oteltest.Recorder, *redis.Client, *dlock.Client, context.Context) {
	o := oteltest.New(t)
	_, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithMeterProvider(o.MP), dlock.WithTracerProvider(o.TP))
	return o, rdb, c, testContext(t, 20*time.Second)
}

// dlock.lock.hold times each lock from obtaining it to the end of its last hold, by how it
// ended; dlock.locks.lost counts the losses by the same attribute, so that an operator tells
// a lease that ran out or a lock taken over from locks a Close ended (a deploy).
func TestTelemetryHoldAndLostByEnd(t *testing.T) {
	o, rdb, c, ctx := recordedClient(t)

	// Released after 50 ms, with a re-entry in between: one sample.
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(dlock.WithLock(ctx, lk), key)
	if err != nil {
		t.Fatal(err)
	}
	_ = inner.Release(ctx)
	time.Sleep(50 * time.Millisecond) // a deliberate window: a hold of 50 ms at least, as checked below
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A WithTTL lease that runs out: expired.
	short, err := c.Acquire(ctx, uniqueKey(t)+"-ttl", dlock.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-short.Done()

	// Taken away in Redis, found by Refresh: taken.
	takenKey := uniqueKey(t) + "-taken"
	taken, err := c.Acquire(ctx, takenKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, lockKeyOf(t, rdb, takenKey)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := taken.Refresh(ctx, time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("Refresh of a lock deleted in Redis: %v, want ErrLockLost", err)
	}

	// Held at Close: closed.
	c2 := dlock.New(rdb, dlock.WithMeterProvider(o.MP), dlock.WithTracerProvider(o.TP))
	held, err := c2.Acquire(ctx, uniqueKey(t)+"-closed")
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(held.Err(), dlock.ErrLockLost) {
		t.Fatalf("held at Close: %v", held.Err())
	}

	count, seconds := holdsByEnd(t, o)
	want := map[string]uint64{dlock.EndReleased: 1, dlock.EndExpired: 1, dlock.EndTaken: 1, dlock.EndClosed: 1}
	for end, n := range want {
		if count[end] != n {
			t.Errorf("dlock.lock.hold samples with dlock.end=%s: %d, want %d (all: %v)", end, count[end], n, count)
		}
	}
	if len(count) != len(want) {
		t.Errorf("dlock.lock.hold by dlock.end = %v, want only %v", count, want)
	}
	if s := seconds[dlock.EndReleased]; s < 0.05 || s > 10 {
		t.Errorf("released hold of about 50 ms recorded as %.3f s", s)
	}
	if s := seconds[dlock.EndExpired]; s < 0.05 || s > 10 {
		t.Errorf("expired 100 ms lease recorded as %.3f s", s)
	}
	lost := o.CounterByAttr(t, "dlock.locks.lost", "dlock.end")
	wantLost := map[string]int64{dlock.EndExpired: 1, dlock.EndTaken: 1, dlock.EndClosed: 1}
	if len(lost) != len(wantLost) {
		t.Errorf("dlock.locks.lost by dlock.end = %v, want %v", lost, wantLost)
	}
	for end, n := range wantLost {
		if lost[end] != n {
			t.Errorf("dlock.locks.lost by dlock.end = %v, want %v", lost, wantLost)
			break
		}
	}
	m := o.Metrics(t)
	if h, ok := m["dlock.lock.hold"].(metricdata.Histogram[float64]); !ok || len(h.DataPoints) == 0 ||
		h.DataPoints[0].Bounds[len(h.DataPoints[0].Bounds)-1] != 3600 {
		t.Errorf("dlock.lock.hold: want a histogram in seconds with bounds up to an hour, got %#v", m["dlock.lock.hold"])
	}
}

// A wait that the caller cancelled is outcome canceled; one whose deadline passed (the
// caller's, or WithMaxWait) is timeout; neither sets the span's error status.
func TestTelemetryCanceledIsNotTimeout(t *testing.T) {
	o, _, c, ctx := recordedClient(t)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Acquire(cctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if _, err := c.Acquire(ctx, key, dlock.WithMaxWait(50*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WithMaxWait: %v", err)
	}
	dead, stop := context.WithCancel(ctx)
	stop()
	if _, err := c.TryAcquire(dead, uniqueKey(t)+"-free"); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with a cancelled context: %v", err)
	}

	var outcomes []string
	for _, s := range o.Spans.Ended()[1:] { // after the holder's own acquisition
		outcomes = append(outcomes, oteltest.Attr(s, "dlock.outcome"))
		if s.Status().Code != 0 {
			t.Errorf("span with outcome %s has status %v, want unset", oteltest.Attr(s, "dlock.outcome"), s.Status().Code)
		}
	}
	want := []string{dlock.OutcomeCanceled, dlock.OutcomeTimeout, dlock.OutcomeCanceled}
	if len(outcomes) != len(want) || outcomes[0] != want[0] || outcomes[1] != want[1] || outcomes[2] != want[2] {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	byOutcome := map[string]uint64{}
	for _, dp := range o.Histogram(t, "dlock.acquire.wait").DataPoints {
		v, _ := dp.Attributes.Value("dlock.outcome")
		byOutcome[v.Emit()] += dp.Count
	}
	if byOutcome[dlock.OutcomeCanceled] != 2 || byOutcome[dlock.OutcomeTimeout] != 1 {
		t.Fatalf("dlock.acquire.wait by outcome %v, want 2 canceled and 1 timeout", byOutcome)
	}
}
