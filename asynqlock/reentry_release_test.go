package asynqlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// gateKey marks the context of a call whose first answered command replyGate holds back.
type gateKey struct{}

// replyGate holds back the reply of the first command, sent with a context carrying it, that
// Redis answered without error: ran is closed once Redis has run the command, and the reply
// reaches the caller only when hold is closed. It puts a test between a script's effect in
// Redis and the moment its caller hears of it.
type replyGate struct {
	once sync.Once
	ran  chan struct{}
	hold chan struct{}
}

func (*replyGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*replyGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if g, ok := ctx.Value(gateKey{}).(*replyGate); ok && err == nil {
			g.once.Do(func() {
				close(g.ran)
				<-g.hold
			})
		}
		return err
	}
}

func (*replyGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A nested layer re-entering the lock of its own task while that task's hold is being
// released (the handler ends its hold itself, while work it started re-enters with its
// context) is not busy: nobody else holds the key, the hold it re-enters is ending. dlock
// answers such a re-entry as the ending context will (context.Canceled) even before the
// context has ended, which it does when the Release returns; the layer must not read that
// answer as contention (a busy *ErrLocked would have asynq retry the task as if another
// holder had the key).
func TestReentryRacingReleaseIsNotBusy(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	rdb := e.srv.Client(t)
	rdb.AddHook(&replyGate{})
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })

	var innerErr error
	inner := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("the nested handler ran on a hold being released")
		return nil
	}), c, taskAccountKey, asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	outer := asynqlock.Wrap(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		lk, _ := asynqlock.FromContext(ctx)
		g := &replyGate{ran: make(chan struct{}), hold: make(chan struct{})}
		released := make(chan error, 1)
		go func() { released <- lk.Release(context.WithValue(ctx, gateKey{}, g)) }()
		<-g.ran // the key is free in Redis; the Release has not heard so yet
		innerErr = inner.ProcessTask(ctx, task)
		close(g.hold)
		if err := <-released; err != nil {
			t.Errorf("release: %v", err)
		}
		return nil
	}), c, taskAccountKey)

	if err := outer.ProcessTask(t.Context(), asynq.NewTask("account:deduct", []byte(`{"account_id":"re1"}`))); err != nil {
		t.Fatalf("outer task: %v", err)
	}
	var locked *asynqlock.ErrLocked
	if errors.As(innerErr, &locked) || !errors.Is(innerErr, context.Canceled) {
		t.Errorf("re-entry racing the release of the outer hold: %v, want canceled (context.Canceled), not busy", innerErr)
	}
	wantSpan(t, oneSpan(t, o), asynqlock.OutcomeCanceled, codes.Error) // the nested layer's
}
