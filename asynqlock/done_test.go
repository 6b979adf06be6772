package asynqlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/keyfunc"
)

var paymentKey = keyfunc.Join(keyfunc.Const("payment"), keyfunc.JSON("payment_id"))

// The same payment enqueued three times (three task ids, one payment id) is applied once,
// whether the duplicates find the lock busy and come back, or wait for it.
func TestDoneMarkerAppliesPaymentOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []asynqlock.Option
	}{
		{"busy then replayed", []asynqlock.Option{asynqlock.WithRetryIn(time.Second)}},
		{"waiting", []asynqlock.Option{asynqlock.WithWait(5 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

			var applied atomic.Int64
			mux := asynq.NewServeMux()
			opts := append([]asynqlock.Option{asynqlock.WithDoneMarker(time.Minute), asynqlock.WithMeterProvider(mp)}, tc.opts...)
			mux.Use(asynqlock.New(e.lock, paymentKey, opts...))
			mux.HandleFunc("payment:capture", func(ctx context.Context, _ *asynq.Task) error {
				applied.Add(1)
				select { // long enough for the duplicates to arrive while it runs
				case <-time.After(200 * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			})
			e.startServer(t, serverConfig(5), mux)
			e.startServer(t, serverConfig(5), mux)

			c := e.client(t)
			var infos []*asynq.TaskInfo
			for range 3 {
				infos = append(infos, e.enqueue(t, c, asynq.NewTask("payment:capture", []byte(`{"payment_id":"pay_123","amount":990}`)),
					asynq.Retention(time.Minute)))
			}
			insp := e.inspector(t)
			for _, info := range infos {
				taskState(t, insp, info, asynq.TaskStateCompleted, 15*time.Second)
			}
			if applied.Load() != 1 {
				t.Fatalf("payment applied %d times, want 1", applied.Load())
			}
			if infos[0].ID == infos[1].ID || infos[1].ID == infos[2].ID {
				t.Fatal("the three tasks should have distinct ids")
			}
			counts := outcomeCounts(t, reader)
			if counts[asynqlock.OutcomeObtained] != 1 || counts[asynqlock.OutcomeReplayed] != 2 {
				t.Fatalf("outcomes %v: want 1 obtained and 2 replayed", counts)
			}
		})
	}
}

// The marker is kept for the retention given; none (<= 0) means DefaultRetention, 24 h, as
// ginlock keeps its responses, not a marker gone in a second that lets a duplicate pay again;
// below a second is raised to one.
func TestDoneMarkerRetention(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		retention, min, max time.Duration
	}{
		{0, asynqlock.DefaultRetention - time.Minute, asynqlock.DefaultRetention},
		{-time.Hour, asynqlock.DefaultRetention - time.Minute, asynqlock.DefaultRetention},
		{time.Millisecond, 0, time.Second},
		{2 * time.Hour, 2*time.Hour - time.Minute, 2 * time.Hour},
	} {
		h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }),
			e.lock, paymentKey, asynqlock.WithDoneMarker(tc.retention))
		id := fmt.Sprintf("pay_ret%d", i)
		if err := h.ProcessTask(t.Context(), asynq.NewTask("payment:capture", []byte(`{"payment_id":"`+id+`"}`))); err != nil {
			t.Fatalf("retention %v: %v", tc.retention, err)
		}
		keys := e.rdb.Keys(t.Context(), "*"+id+"*done*").Val()
		if len(keys) != 1 {
			t.Fatalf("retention %v: done marker keys %v, want one", tc.retention, keys)
		}
		if ttl := e.rdb.PTTL(t.Context(), keys[0]).Val(); ttl <= tc.min || ttl > tc.max {
			t.Errorf("WithDoneMarker(%v): marker kept for %v, want in (%v, %v]", tc.retention, ttl, tc.min, tc.max)
		}
	}
}

// A failed handler leaves no marker: the next task with the key runs.
func TestDoneMarkerNotWrittenOnError(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int64
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if calls.Add(1) == 1 {
			return context.DeadlineExceeded // stands for any failure
		}
		return nil
	}), e.lock, paymentKey, asynqlock.WithDoneMarker(time.Minute))
	task := asynq.NewTask("payment:capture", []byte(`{"payment_id":"p1"}`))
	for i, want := range []bool{true, false, false} {
		err := h.ProcessTask(t.Context(), task)
		if (err != nil) != want {
			t.Fatalf("call %d: err = %v", i, err)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (fail, succeed, then replayed)", calls.Load())
	}
	rec, ok, err := e.lock.Completed(t.Context(), "payment:p1")
	if err != nil || !ok {
		t.Fatalf("Completed = %q, %v, %v: want a marker", rec, ok, err)
	}
}

// outcomeCounts sums the asynqlock.tasks counter by outcome.
func outcomeCounts(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != asynqlock.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "asynqlock.tasks" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("asynqlock.outcome"))
				counts[v.AsString()] += dp.Value
			}
		}
	}
	return counts
}

// The handler succeeded under the lock, but the done marker cannot be written (the store
// goes away right after the handler returns): the task must still succeed (nil), or
// asynq runs the payment again.
func TestDoneMarkerNotWrittenTaskSucceeds(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	var ran atomic.Int64
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran.Add(1)
		if err := e.srv.Kill(); err != nil {
			t.Error(err)
		}
		return nil
	}), e.lock, taskAccountKey, asynqlock.WithDoneMarker(time.Minute))
	err := h.ProcessTask(ctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	if ran.Load() != 1 {
		t.Fatalf("handler ran %d times", ran.Load())
	}
	if err != nil {
		t.Fatalf("handler succeeded but the task failed (asynq would run it again): %v", err)
	}
}

// With a done marker, a lock lost while the handler ran still fails the task with
// dlock.ErrLockLost (retried by asynq), even when the handler itself returns nil.
func TestLostLockWithDoneMarkerFails(t *testing.T) {
	e := newEnv(t, dlock.WithLease(300*time.Millisecond))
	h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		keys := locktest.Held(t, e.rdb)
		if len(keys) != 1 {
			t.Errorf("lock keys %v, want one", keys)
			return nil
		}
		if err := e.rdb.Del(ctx, keys[0]).Err(); err != nil {
			t.Error(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Error("handler not cancelled on loss")
		}
		return nil // a handler that finished its work anyway
	}), e.lock, taskAccountKey, asynqlock.WithDoneMarker(time.Minute))
	err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	if !errors.Is(err, dlock.ErrLockLost) || !asynqlock.IsFailure(err) {
		t.Fatalf("err = %v; want a failure wrapping dlock.ErrLockLost", err)
	}
}

// With a done marker, a lock lost while the handler ran fails the task also when the
// watchdog has not noticed yet when the handler returns (it renews every third of the
// lease): the lock is someone else's in Redis, so Complete reports the loss, the marker is
// not stored, and asynq retries, as without a marker.
func TestLostLockUnnoticedWithDoneMarkerFails(t *testing.T) {
	e := newEnv(t) // default lease: no renewal while the handler runs
	other := dlock.New(e.srv.Client(t))
	t.Cleanup(func() { _ = other.Close() })
	var taken *dlock.Lock
	h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		mine, ok := dlock.FromContext(ctx)
		if !ok {
			t.Error("no lock in the handler's context")
			return nil
		}
		for _, k := range locktest.Held(t, e.rdb) {
			e.rdb.Del(ctx, k) // the lease ran out in Redis during a pause
		}
		var err error
		if taken, err = other.TryAcquire(context.Background(), mine.Key()); err != nil {
			t.Errorf("a duplicate could not take the lost lock: %v", err)
		}
		if mine.Err() != nil {
			t.Error("the loss was noticed before the handler returned; the test needs it unnoticed")
		}
		return nil // the work, done while not alone
	}), e.lock, taskAccountKey, asynqlock.WithDoneMarker(time.Minute))
	err := h.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"1"}`)))
	if taken != nil {
		_ = taken.Release(context.Background())
	}
	if !errors.Is(err, dlock.ErrLockLost) || !asynqlock.IsFailure(err) {
		t.Fatalf("err = %v; want a failure wrapping dlock.ErrLockLost", err)
	}
	if keys := e.rdb.Keys(context.Background(), "*:done").Val(); len(keys) != 0 {
		t.Fatalf("done marker stored for work that did not run alone: %v", keys)
	}
}
