package asynqlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// A key part computed by keyfunc.From (a tenant looked up in a database, say) that fails for a
// transient reason is not bad input: the task is retried, by asynq's normal policy, and runs
// once the lookup works. Only keyfunc's input errors archive a task.
func TestKeyFuncOwnErrorIsRetried(t *testing.T) {
	e := newEnv(t)
	var lookups, runs atomic.Int64
	errDB := errors.New("tenant lookup: connection refused")
	tenant := keyfunc.From("tenant", func(keyfunc.Source) (string, error) {
		if lookups.Add(1) == 1 {
			return "", errDB // the database blinked once
		}
		return "t1", nil
	})
	key := keyfunc.Join(keyfunc.Const("tenant"), tenant)
	cfg := serverConfig(1)
	cfg.RetryDelayFunc = asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
	mux := asynq.NewServeMux()
	mux.Handle("tenant:sync", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}), e.lock, key))
	e.startServer(t, cfg, mux)
	info := e.enqueue(t, e.client(t), asynq.NewTask("tenant:sync", nil), asynq.MaxRetry(3), asynq.Retention(time.Minute))
	state, got := finalState(t, e.inspector(t), info, 20*time.Second)
	if state != "completed" || runs.Load() != 1 {
		lastErr := ""
		if got != nil {
			lastErr = got.LastErr
		}
		t.Fatalf("key function failed once with a transient error (MaxRetry 3): task %s after %d lookups, %d runs, LastErr %q; "+
			"want it retried and completed", state, lookups.Load(), runs.Load(), lastErr)
	}
}

// A context value of a type keyfunc cannot read was put there by the worker's own middleware:
// the server's mistake, not the task's. The task is not archived as invalid (asynq retries
// it), and the handler does not run.
func TestUnsupportedContextValueIsRetried(t *testing.T) {
	e := newEnv(t)
	type tenantKey struct{}
	key := keyfunc.Join(keyfunc.Const("tenant"), keyfunc.ContextValue(tenantKey{}).Named("tenant"))
	runs := 0
	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { runs++; return nil }), e.lock, key)
	for _, tc := range []struct {
		name  string
		value any
		want  error
	}{
		{"of a type keyfunc cannot read", struct{ ID int }{7}, keyfunc.ErrUnsupportedType},
		{"over the part cap", strings.Repeat("t", keyfunc.DefaultMaxLen+1), keyfunc.ErrContextValue},
	} {
		ctx := context.WithValue(t.Context(), tenantKey{}, tc.value)
		err := h.ProcessTask(ctx, asynq.NewTask("tenant:sync", nil))
		if !errors.Is(err, tc.want) || errors.Is(err, asynq.SkipRetry) || runs != 0 {
			t.Fatalf("context value %s: err %v (SkipRetry %v), handler ran %d times; want %v, retried, not run",
				tc.name, err, errors.Is(err, asynq.SkipRetry), runs, tc.want)
		}
	}
}
