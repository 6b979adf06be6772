package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// A wait on a busy lock whose deadline passes while its look has been in flight for ~50 ms
// (a latency spike), on a client with ContextTimeoutEnabled and fail-fast retries: go-redis
// ends the read at the deadline with an i/o timeout a moment before the context ends. That
// is the wait running out (ErrNotObtained, outcome timeout), not a store failure, which
// takes a look unanswered for 100 ms.
func TestShortLookAtDeadlineIsNotStoreFailure(t *testing.T) {
	o := oteltest.New(t)
	srv, _, other := setup(t)
	rdb := srv.Client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true; o.MaxRetries = -1 })
	c := newClient(t, rdb, dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	held, err := other.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	if err := rdb.Ping(ctx).Err(); err != nil { // a warm connection
		t.Fatal(err)
	}

	if err := srv.Pause(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = c.Acquire(wctx, key)
	cancel()
	// Acquire ends its span before it returns (the recorder records it as it ends).
	var out string
	for _, s := range o.Spans.Ended() {
		set := attribute.NewSet(s.Attributes()...)
		v, _ := set.Value("dlock.outcome")
		out = v.AsString()
	}
	if !errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnavailable) || out != dlock.OutcomeTimeout {
		t.Fatalf("busy lock, look unanswered for 50ms at the deadline: err = %v, span outcome %q; want ErrNotObtained and the deadline (outcome timeout)", err, out)
	}
}
