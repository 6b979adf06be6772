package dlock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// A wait that ends because Redis did not answer is a store failure: Acquire returns an error
// matching ErrUnavailable (not ErrNotObtained). The dlock.acquire span must then say so
// (outcome error, codes.Error), not "timeout" with an unset status.
func TestTelemetryWaitOnSilentStoreIsError(t *testing.T) {
	o := oteltest.New(t)
	srv, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	ctx := testContext(t, 10*time.Second)
	if err := srv.Pause(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := c.Acquire(actx, uniqueKey(t))
	cancel()
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("precondition: err = %v, want ErrUnavailable and not ErrNotObtained", err)
	}
	ended := o.Spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans", len(ended))
	}
	s := ended[0]
	set := attribute.NewSet(s.Attributes()...)
	out, _ := set.Value("dlock.outcome")
	if out.AsString() != dlock.OutcomeError || s.Status().Code != codes.Error {
		t.Errorf("Acquire failed with %q (matches ErrUnavailable), but span has dlock.outcome=%q status=%v; want %q + codes.Error",
			err, out.AsString(), s.Status().Code, dlock.OutcomeError)
	}
}

// Waits are recorded in seconds, with bounds that tell a lock taken at once from a 400 ms
// wait (the SDK's default bounds, 0, 5, 10, ..., suit milliseconds).
func TestTelemetryWaitBucketsInSeconds(t *testing.T) {
	o := oteltest.New(t)
	_, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithMeterProvider(o.MP), dlock.WithTracerProvider(o.TP))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key) // uncontended: well under a millisecond or so
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, _ = c.Acquire(wctx, key) // waits 400 ms, outcome timeout
	cancel()
	_ = lk.Release(ctx)

	h, ok := o.Metrics(t)["dlock.acquire.wait"].(metricdata.Histogram[float64])
	if !ok {
		t.Fatal("no dlock.acquire.wait histogram")
	}
	for _, dp := range h.DataPoints {
		out, _ := dp.Attributes.Value("dlock.outcome")
		first := -1
		for i, n := range dp.BucketCounts {
			if n > 0 {
				first = i
				break
			}
		}
		t.Logf("outcome %s: bounds %v, sample %.4fs in bucket %d", out.AsString(), dp.Bounds, dp.Sum, first)
	}
	// Both samples in the same bucket means the histogram cannot tell them apart.
	var buckets []int
	for _, dp := range h.DataPoints {
		for i, n := range dp.BucketCounts {
			if n > 0 {
				buckets = append(buckets, i)
			}
		}
	}
	if len(buckets) != 2 {
		t.Fatalf("samples in buckets %v, want one sample per outcome", buckets)
	}
	if buckets[0] == buckets[1] {
		t.Errorf("an uncontended acquisition and a 0.4s wait fall in the same bucket (index %d, bounds %v): second-valued histogram uses millisecond default boundaries",
			buckets[0], h.DataPoints[0].Bounds)
	}
	if got := h.DataPoints[0].Bounds; !slices.Equal(got, dlock.WaitBuckets()) {
		t.Errorf("histogram bounds %v, WaitBuckets() %v", got, dlock.WaitBuckets())
	}
}

// WaitBuckets hands out a copy: a caller that changes it changes nobody else's bounds.
func TestWaitBucketsIsACopy(t *testing.T) {
	b := dlock.WaitBuckets()
	if len(b) == 0 || b[0] >= 0.001 || b[len(b)-1] < 60 {
		t.Fatalf("WaitBuckets() = %v, want bounds from under a millisecond to a minute", b)
	}
	b[0] = 42
	if again := dlock.WaitBuckets(); again[0] == 42 {
		t.Errorf("changing the returned slice changed the next one: %v", again)
	}
}

// dlock.locks.renewed counts leases renewed in Redis: a renewal that found the lock gone ends
// the lease as lost and is not counted.
func TestTelemetryRenewedCountsOnlyRenewals(t *testing.T) {
	o := oteltest.New(t)
	_, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithMeterProvider(o.MP), dlock.WithTracerProvider(o.TP), dlock.WithLease(300*time.Millisecond))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The watchdog renews every lease/3: wait for a renewal that got through.
	var before int64
	for before == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("no renewal counted while the lock was held")
		case <-time.After(20 * time.Millisecond):
		}
		before = oteltest.Sum(o.Metrics(t)["dlock.locks.renewed"])
	}
	if err := rdb.Del(ctx, lockKeyOf(t, rdb, key)).Err(); err != nil {
		t.Fatal(err)
	}
	<-lk.Done()
	if !errors.Is(lk.Err(), dlock.ErrLockLost) {
		t.Fatalf("lock ended with %v", lk.Err())
	}
	m := o.Metrics(t)
	if r, l := oteltest.Sum(m["dlock.locks.renewed"]), oteltest.Sum(m["dlock.locks.lost"]); r != before || l != 1 {
		t.Errorf("dlock.locks.renewed = %d (%d before the loss), dlock.locks.lost = %d: the renewal that found the lock gone must count as lost only", r, before, l)
	}
}

// Re-entry and a repeated release count one held lease once; the re-entry has a span of its
// own, marked dlock.reentry.
func TestTelemetryHeldCountsLeaseOnce(t *testing.T) {
	o := oteltest.New(t)
	_, rdb, _ := setup(t)
	c := newClient(t, rdb, dlock.WithMeterProvider(o.MP), dlock.WithTracerProvider(o.TP))
	ctx := testContext(t, 10*time.Second)
	key := "user@example.com:" + uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(dlock.WithLock(ctx, outer), key)
	if err != nil {
		t.Fatal(err)
	}
	if n := oteltest.Sum(o.Metrics(t)["dlock.locks.held"]); n != 1 {
		t.Errorf("held with a re-entry = %d, want 1", n)
	}
	_ = inner.Release(ctx)
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	_ = outer.Release(ctx)
	if n := oteltest.Sum(o.Metrics(t)["dlock.locks.held"]); n != 0 {
		t.Errorf("held after releases = %d, want 0", n)
	}
	if ended := o.Spans.Ended(); len(ended) != 2 || oteltest.Attr(ended[1], "dlock.reentry") != "true" {
		t.Errorf("%d dlock.acquire spans, want 2, the second marked dlock.reentry", len(ended))
	}
	for _, s := range o.Spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Value.Type() == attribute.STRING && len(a.Value.AsString()) > 0 && a.Value.AsString() == key {
				t.Errorf("raw key in %s", a.Key)
			}
		}
	}
}

// dlock.handed_off tells an acquisition that took a free lock (false) from one handed the lock
// by its releaser while it waited in line (true).
func TestTelemetryHandedOff(t *testing.T) {
	o := oteltest.New(t)
	_, rdb, c := setup(t, dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)
	lk, got := queueBehind(t, ctx, rdb, c, c, key)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_ = received(t, got).Release(ctx)
	if got := handedOffAttrs(o); !slices.Equal(got, []string{"false", "true"}) {
		t.Errorf("dlock.handed_off of the acquisitions, in the order they ended: %v, want [false true]", got)
	}
}

// handedOffAttrs is the dlock.handed_off attribute of every dlock.acquire span, in the order
// the spans ended.
func handedOffAttrs(o *oteltest.Recorder) []string {
	var out []string
	for _, s := range o.Spans.Ended() {
		if s.Name() == "dlock.acquire" {
			out = append(out, oteltest.Attr(s, "dlock.handed_off"))
		}
	}
	return out
}

// Every Acquire call has its span and its wait sample: a re-entry (dlock.reentry) whether it
// succeeds or fails, and a call refused before Redis is asked (an invalid key, a closed
// Client), which is an error like any other failed acquisition.
func TestTelemetryReentryAndRefusals(t *testing.T) {
	o := oteltest.New(t)
	srv, rdb, _ := setup(t)
	c := dlock.New(rdb, dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	held := dlock.WithLock(ctx, lk)
	inner, err := c.Acquire(held, key)
	if err != nil || inner.HoldCount() != 2 {
		t.Fatalf("re-entry: %v", err)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, ""); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(held, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("re-entry with Redis down: %v, want ErrUnavailable", err)
	}
	_ = c.Close()
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}

	type span struct {
		outcome string
		reentry bool
		failed  bool
	}
	var got []span
	for _, s := range o.Spans.Ended() {
		if s.Name() != "dlock.acquire" {
			continue
		}
		set := attribute.NewSet(s.Attributes()...)
		re, _ := set.Value("dlock.reentry")
		got = append(got, span{oteltest.Attr(s, "dlock.outcome"), re.AsBool(), s.Status().Code == codes.Error})
	}
	want := []span{
		{dlock.OutcomeObtained, false, false},
		{dlock.OutcomeObtained, true, false},
		{dlock.OutcomeError, false, true},
		{dlock.OutcomeError, true, true},
		{dlock.OutcomeError, false, true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("spans (outcome, reentry, failed) %v, want %v", got, want)
	}
	if n := oteltest.Count(o.Histogram(t, "dlock.acquire.wait")); n != uint64(len(want)) {
		t.Errorf("%d wait samples, want %d", n, len(want))
	}
}
