package asynqlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
)

// A mux-wide layer serializes everything on the payment key (mux.Use(New(...))), and the
// capture handler adds a done marker on the same key (Wrap(..., WithDoneMarker)). The inner
// layer re-enters the outer layer's lock; its re-entry must still find the marker, so a
// second capture of a payment marked done does not run.
func TestNestedLayersKeepDoneMarker(t *testing.T) {
	e := newEnv(t)
	var applied atomic.Int64
	mux := asynq.NewServeMux()
	mux.Use(asynqlock.New(e.lock, paymentKey)) // serialize every payment task
	mux.Handle("payment:capture", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		applied.Add(1)
		return nil
	}), e.lock, paymentKey, asynqlock.WithDoneMarker(time.Minute)))
	e.startServer(t, serverConfig(2), mux)

	c, insp := e.client(t), e.inspector(t)
	for i := range 2 {
		info := e.enqueue(t, c, asynq.NewTask("payment:capture", []byte(`{"payment_id":"pay_9","amount":990}`)),
			asynq.Retention(time.Minute))
		taskState(t, insp, info, asynq.TaskStateCompleted, 10*time.Second)
		if i == 0 {
			if _, ok, err := e.lock.Completed(t.Context(), "payment:pay_9"); err != nil || !ok {
				t.Fatalf("after the first capture: marker %v, %v; want one", ok, err)
			}
		}
	}
	if applied.Load() != 1 {
		t.Fatalf("payment applied %d times with its key marked done after the first, want 1", applied.Load())
	}
}
