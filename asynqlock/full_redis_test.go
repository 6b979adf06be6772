package asynqlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
)

// A payment task that finishes while Redis is full (noeviction) keeps its done marker, so
// its redelivery (asynq's own acknowledgement fails on a full Redis too) does not pay again.
// Before, the marker was refused with OOM and the task was acknowledged without it.
func TestFullRedisDoneMarkerStored(t *testing.T) {
	e := newEnv(t)
	setFull := func(full bool) {
		if err := e.srv.SetFull(context.Background(), full); err != nil {
			t.Error(err)
		}
	}
	var runs atomic.Int32
	h := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if runs.Add(1) == 1 {
			setFull(true) // Redis fills up while the payment runs
		}
		return nil
	}), e.lock, paymentKey, asynqlock.WithDoneMarker(time.Hour))
	task := asynq.NewTask("payment:capture", []byte(`{"payment_id":"pay_full"}`))
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("redelivery while Redis is full: %v, want nil (done)", err)
	}
	setFull(false)
	if err := h.ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("redelivery with room again: %v, want nil (done)", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the payment ran %d times", n)
	}
}
