package asynqlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's Redis: a raw client for assertions and fault injection, and a dlock
// Client for the middleware. asynq servers, schedulers and clients use their own
// connections, as in an application.
type env struct {
	srv  *redistest.Server
	rdb  *redis.Client
	lock *dlock.Client
}

func newEnv(t *testing.T, opts ...dlock.Option) *env {
	t.Helper()
	srv := redistest.Start(t)
	e := &env{srv: srv, rdb: srv.Client(t)}
	e.lock = dlock.New(srv.Client(t), opts...)
	t.Cleanup(func() { _ = e.lock.Close() })
	return e
}

// serverConfig is a quick asynq server configuration: one queue, fast polling, short
// shutdown, and the two lines asynqlock asks of every server.
func serverConfig(concurrency int) asynq.Config {
	return asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{"default": 1},
		TaskCheckInterval:        50 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout:          2 * time.Second,
		LogLevel:                 asynq.FatalLevel,
		IsFailure:                asynqlock.IsFailure,
		RetryDelayFunc:           asynqlock.RetryDelay(nil),
	}
}

// startServer runs an asynq server with its own Redis connection until the test ends.
func (e *env) startServer(t *testing.T, cfg asynq.Config, h asynq.Handler) {
	t.Helper()
	srv := asynq.NewServerFromRedisClient(e.srv.Client(t), cfg)
	if err := srv.Start(h); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown) // runs before the connection is closed (cleanups are LIFO)
}

func (e *env) client(t *testing.T) *asynq.Client {
	c := asynq.NewClientFromRedisClient(e.srv.Client(t))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (e *env) inspector(t *testing.T) *asynq.Inspector {
	i := asynq.NewInspectorFromRedisClient(e.srv.Client(t))
	t.Cleanup(func() { _ = i.Close() })
	return i
}

func (e *env) enqueue(t *testing.T, c *asynq.Client, task *asynq.Task, opts ...asynq.Option) *asynq.TaskInfo {
	t.Helper()
	info, err := c.Enqueue(task, opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", task.Type(), err)
	}
	return info
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}

// taskState waits for the task to reach want and returns its info.
func taskState(t *testing.T, insp *asynq.Inspector, info *asynq.TaskInfo, want asynq.TaskState, timeout time.Duration) *asynq.TaskInfo {
	t.Helper()
	var got *asynq.TaskInfo
	eventually(t, timeout, fmt.Sprintf("task %s to be %s", info.ID, want), func() bool {
		ti, err := insp.GetTaskInfo(info.Queue, info.ID)
		if err == nil {
			got = ti
		}
		return err == nil && ti.State == want
	})
	return got
}

// errorLog collects the errors asynq servers report through Config.ErrorHandler.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) HandleError(_ context.Context, _ *asynq.Task, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// oneSpan returns the one span o recorded as ended; it fails t when there are more or none.
func oneSpan(t *testing.T, o *oteltest.Recorder) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := o.Spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	return ended[0]
}

// wantSpan fails t unless s ended with outcome and status code.
func wantSpan(t *testing.T, s sdktrace.ReadOnlySpan, outcome string, code codes.Code) {
	t.Helper()
	if out := oteltest.Attr(s, "asynqlock.outcome"); out != outcome || s.Status().Code != code {
		t.Errorf("span outcome %q status %v %q, want %q and %v", out, s.Status().Code, s.Status().Description, outcome, code)
	}
}
