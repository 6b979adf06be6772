package asynqlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"

	"github.com/lockguard/lockguard/asynqlock"
	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
)

// slowLink makes every command of a Redis client take at least its duration, as a store
// across a slow or loaded link answers; a command whose context ends first fails with the
// context's error, as go-redis ends a read at the context's deadline. after, when set, runs
// once each command is answered. The delay stays well under dlock's 100 ms of store
// silence, so a store behind it still counts as answering.
type slowLink struct {
	d     time.Duration
	after func()
}

func (l slowLink) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l slowLink) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := l.delay(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		err := next(ctx, cmd)
		if l.after != nil {
			l.after()
		}
		return err
	}
}

func (l slowLink) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := l.delay(ctx); err != nil {
			return err
		}
		err := next(ctx, cmds)
		if l.after != nil {
			l.after()
		}
		return err
	}
}

func (l slowLink) delay(ctx context.Context) error {
	t := time.NewTimer(l.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slowClient is a dlock Client whose every command goes through link.
func (e *env) slowClient(t *testing.T, link slowLink) *dlock.Client {
	rdb := e.srv.Client(t)
	rdb.AddHook(link)
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A busy task with under a second left must still answer busy before its deadline. The wait
// used to end a tenth of the time left before it (35 ms of 350 ms); ending a wait takes dlock
// a round trip more (the waiter leaves the line), longer than that on a link of 40 ms, so the
// answer came after the deadline: asynq failed the task with context.DeadlineExceeded, a
// retry spent each time (archived after MaxRetry(1)), and the span read canceled (or
// unavailable). asynq's Timeout counts whole seconds, so the server's BaseContext gives each
// task its short deadline; asynq watches it as its own.
func TestBusyWithUnderOneSecondLeftIsBusy(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	ctx := t.Context()
	slow := e.slowClient(t, slowLink{d: 40 * time.Millisecond})

	held, err := e.lock.Acquire(ctx, "account:short1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	// Load dlock's scripts into Redis over a fast link: on the slow one, a script's first use
	// costs a NOSCRIPT round trip more. A wait that ends with no answer in the last 100 ms
	// sends the probe too.
	if _, err := e.lock.Acquire(ctx, "account:short1", dlock.WithMaxWait(300*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("warm-up on a held lock: %v, want not obtained", err)
	}
	// Open the slow client's connections before any task runs, as a worker that has served
	// tasks has them: on the slow link a new connection costs three round trips more than
	// the look itself (HELLO, CLIENT MAINT_NOTIFICATIONS, CLIENT SETINFO). Paid by the
	// first attempt inside its 350 ms, they left it a fraction of the 300 ms margin that the
	// test is about, and on a loaded machine it answered after the deadline. Repeated until
	// a wait ends as one on a held lock does: under load, the probe that may end it can miss
	// dlock's 100 ms bound and answer unavailable.
	eventually(t, 10*time.Second, "a wait on the slow link to find the lock busy", func() bool {
		_, err := slow.Acquire(ctx, "account:short1", dlock.WithMaxWait(50*time.Millisecond))
		return errors.Is(err, dlock.ErrNotObtained)
	})

	var mu sync.Mutex
	var cancels []context.CancelFunc
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, cancel := range cancels {
			cancel()
		}
	})
	errs := &errorLog{}
	cfg := serverConfig(1)
	cfg.ErrorHandler = errs
	cfg.RetryDelayFunc = asynqlock.RetryDelay(func(int, error, *asynq.Task) time.Duration { return time.Second })
	cfg.BaseContext = func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		cancels = append(cancels, cancel)
		return ctx
	}
	var runs atomic.Int64
	mux := asynq.NewServeMux()
	mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		runs.Add(1)
		return nil
	}), slow, taskAccountKey, asynqlock.WithWait(10*time.Second), asynqlock.WithRetryIn(time.Second),
		asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP)))
	e.startServer(t, cfg, mux)

	info := e.enqueue(t, e.client(t), asynq.NewTask("account:deduct", []byte(`{"account_id":"short1"}`)),
		asynq.MaxRetry(1), asynq.Retention(time.Minute))
	eventually(t, 20*time.Second, "two attempts on the held lock", func() bool { return len(errs.all()) >= 2 })
	// An attempt's span ends before its answer leaves the middleware.
	for _, s := range o.Spans.Ended() {
		if out := oteltest.Attr(s, "asynqlock.outcome"); out != asynqlock.OutcomeBusy || s.Status().Code == codes.Error {
			t.Errorf("span of an attempt on the held lock with 350 ms left: outcome %q status %v %q, want %q and no error",
				out, s.Status().Code, s.Status().Description, asynqlock.OutcomeBusy)
		}
	}
	for _, err := range errs.all() {
		var locked *asynqlock.ErrLocked
		if !errors.As(err, &locked) || locked.RetryIn < time.Second || locked.RetryIn >= 1500*time.Millisecond {
			t.Fatalf("asynq got %v for a busy task with 350 ms left; want *ErrLocked with RetryIn in [1s, 1.5s) (all errors: %v)", err, errs.all())
		}
	}

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	state, got := finalState(t, e.inspector(t), info, 20*time.Second)
	if state != "completed" || got.Retried != 0 || runs.Load() != 1 {
		t.Fatalf("task %s, Retried %d, runs %d: want it completed once the lock was free, no retry used up", state, got.Retried, runs.Load())
	}
}

// With little time left, a wait that the task's own context cancels still reads as canceled:
// only a deadline that passes after the wait's own bound leaves the answer busy.
func TestShortDeadlineCancelIsCanceled(t *testing.T) {
	o := oteltest.New(t)
	e := newEnv(t)
	ctx := t.Context()
	held, err := e.lock.Acquire(ctx, "account:short2")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()

	cause := errors.New("task cancelled")
	tctx, cancelDeadline := context.WithTimeout(ctx, 2*time.Second)
	defer cancelDeadline()
	tctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	// Cancel as soon as the task's first look at the lock is answered: the wait is under way.
	var once sync.Once
	slow := e.slowClient(t, slowLink{d: time.Millisecond, after: func() { once.Do(func() { cancel(cause) }) }})

	h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("handler ran on a held lock")
		return nil
	}), slow, taskAccountKey, asynqlock.WithWait(10*time.Second),
		asynqlock.WithTracerProvider(o.TP), asynqlock.WithMeterProvider(o.MP))
	err = h.ProcessTask(tctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"short2"}`)))
	var locked *asynqlock.ErrLocked
	if !errors.Is(err, cause) || errors.As(err, &locked) {
		t.Fatalf("wait cancelled with 2 s left: %v, want an error wrapping the cause, not busy", err)
	}
	wantSpan(t, oneSpan(t, o), asynqlock.OutcomeCanceled, codes.Error)
}
