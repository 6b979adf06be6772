package asynqlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/asynqlock"
)

// busyRetry is what one busy attempt told asynq: the error's RetryIn, its text, and the delay
// RetryDelay gave asynq for it.
type busyRetry struct {
	retryIn time.Duration
	delay   time.Duration
	text    string
}

// busyRetries enqueues n tasks for one account whose lock another holder keeps, on a real
// asynq server with the middleware configured by opts, and returns what their first n busy
// attempts told asynq.
func busyRetries(t *testing.T, n int, account string, opts ...asynqlock.Option) []busyRetry {
	t.Helper()
	e := newEnv(t)
	ctx := t.Context()

	var mu sync.Mutex
	var got []busyRetry
	cfg := serverConfig(4)
	retryDelay := asynqlock.RetryDelay(nil)
	cfg.RetryDelayFunc = func(n int, err error, task *asynq.Task) time.Duration {
		d := retryDelay(n, err, task)
		var le *asynqlock.ErrLocked
		if !errors.As(err, &le) {
			t.Errorf("task failed with %v, want only busy errors", err)
			return d
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, busyRetry{retryIn: le.RetryIn, delay: d, text: err.Error()})
		return d
	}
	mux := asynq.NewServeMux()
	mux.Handle("account:deduct", asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		t.Error("handler ran on a busy lock")
		return nil
	}), e.lock, taskAccountKey, opts...))
	e.startServer(t, cfg, mux)

	held, err := e.lock.Acquire(ctx, "account:"+account)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	c := e.client(t)
	payload := []byte(fmt.Sprintf(`{"account_id":%q}`, account))
	for range n {
		e.enqueue(t, c, asynq.NewTask("account:deduct", payload), asynq.MaxRetry(5), asynq.Retention(time.Minute))
	}
	eventually(t, 20*time.Second, fmt.Sprintf("%d busy attempts", n), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= n
	})
	mu.Lock()
	defer mu.Unlock()
	return append([]busyRetry(nil), got...)
}

// Many busy tasks on one key do not all come back at the same instant: each busy attempt's
// RetryIn is WithRetryIn's d plus a random extra, by default in [d, 1.5d), and RetryDelay
// hands asynq exactly that RetryIn, which the error's text names too.
func TestBusyRetryInJittered(t *testing.T) {
	const n, d = 20, 2 * time.Second
	got := busyRetries(t, n, "herd", asynqlock.WithRetryIn(d))
	distinct := map[time.Duration]bool{}
	for _, r := range got {
		if r.retryIn < d || r.retryIn >= d+d/2 {
			t.Errorf("RetryIn %v, want it in [%v, %v)", r.retryIn, d, d+d/2)
		}
		if r.delay != r.retryIn {
			t.Errorf("RetryDelay gave asynq %v for an error with RetryIn %v", r.delay, r.retryIn)
		}
		if !strings.Contains(r.text, "retry in "+r.retryIn.String()) {
			t.Errorf("error %q does not name its RetryIn %v", r.text, r.retryIn)
		}
		distinct[r.retryIn] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("%d busy attempts, all with RetryIn %v: want them spread", len(got), got[0].retryIn)
	}
	t.Logf("%d busy attempts, %d distinct RetryIn values", len(got), len(distinct))
}

// WithRetryJitter(0) turns the jitter off: every busy attempt's RetryIn is exactly d. A
// fraction of 1 spreads RetryIn over [d, 2d).
func TestBusyRetryJitterFraction(t *testing.T) {
	const n, d = 20, 2 * time.Second
	for _, tc := range []struct {
		name    string
		frac    float64
		below   time.Duration // RetryIn is in [d, below)
		spreads bool
	}{
		{"off", 0, d + 1, false},
		{"whole", 1, 2 * d, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := busyRetries(t, n, "frac-"+tc.name, asynqlock.WithRetryIn(d), asynqlock.WithRetryJitter(tc.frac))
			distinct := map[time.Duration]bool{}
			for _, r := range got {
				if r.retryIn < d || r.retryIn >= tc.below || r.delay != r.retryIn {
					t.Errorf("RetryIn %v, RetryDelay %v; want both the same, in [%v, %v)", r.retryIn, r.delay, d, tc.below)
				}
				distinct[r.retryIn] = true
			}
			if spread := len(distinct) > 1; spread != tc.spreads {
				t.Fatalf("%d busy attempts, %d distinct RetryIn values: want them spread %v", len(got), len(distinct), tc.spreads)
			}
		})
	}
}

// The jitter never pushes RetryIn past the largest Duration, nor below d, however long d is;
// a task that WithBusy archives or drops still names no retry.
func TestBusyRetryJitterBounds(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	held, err := e.lock.Acquire(ctx, "account:bounds")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	for _, tc := range []struct {
		name      string
		opts      []asynqlock.Option
		min, most time.Duration
	}{
		{"longest d", []asynqlock.Option{asynqlock.WithRetryIn(time.Duration(1<<63 - 1)), asynqlock.WithRetryJitter(1)},
			time.Duration(1<<63 - 1), time.Duration(1<<63 - 1)},
		{"near longest d", []asynqlock.Option{asynqlock.WithRetryIn(time.Duration(1<<63 - 1 - 1000)), asynqlock.WithRetryJitter(1)},
			time.Duration(1<<63 - 1 - 1000), time.Duration(1<<63 - 1)},
		{"half the longest d", []asynqlock.Option{asynqlock.WithRetryIn(time.Duration(1 << 62)), asynqlock.WithRetryJitter(1)},
			time.Duration(1 << 62), time.Duration(1<<63 - 1)},
		{"three quarters of the longest d", []asynqlock.Option{asynqlock.WithRetryIn(time.Duration(3 << 61)), asynqlock.WithRetryJitter(1)},
			time.Duration(3 << 61), time.Duration(1<<63 - 1)},
		{"below 1 s raised first", []asynqlock.Option{asynqlock.WithRetryIn(time.Millisecond)},
			time.Second, 1500*time.Millisecond - 1},
		{"revoked", []asynqlock.Option{asynqlock.WithBusy(asynq.RevokeTask), asynqlock.WithRetryJitter(1)}, 0, 0},
		{"archived", []asynqlock.Option{asynqlock.WithBusy(asynq.SkipRetry)}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := asynqlock.Wrap(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
				t.Error("handler ran on a busy lock")
				return nil
			}), e.lock, taskAccountKey, tc.opts...)
			for range 20 {
				err := h.ProcessTask(ctx, asynq.NewTask("account:deduct", []byte(`{"account_id":"bounds"}`)))
				var le *asynqlock.ErrLocked
				if !errors.As(err, &le) {
					t.Fatalf("err = %v, want an *ErrLocked", err)
				}
				if le.RetryIn < tc.min || le.RetryIn > tc.most {
					t.Fatalf("RetryIn %v, want it in [%v, %v]", le.RetryIn, tc.min, tc.most)
				}
			}
		})
	}
}

// WithRetryJitter panics, when the option is made, for a fraction that is negative, above 1
// or not a number: a percentage passed as a fraction (50 for 50%) is a mistake to find at
// start-up, not a retry delay of 51 × d.
func TestWithRetryJitterPanics(t *testing.T) {
	for _, frac := range []float64{-0.1, -1e-300, 1.0000001, 50, math.NaN(), math.Inf(1), math.Inf(-1)} {
		t.Run(fmt.Sprint(frac), func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, "asynqlock: WithRetryJitter") {
					t.Fatalf("WithRetryJitter(%v) recovered %v, want a panic naming WithRetryJitter", frac, r)
				}
			}()
			asynqlock.WithRetryJitter(frac)
		})
	}
	for _, frac := range []float64{0, math.Copysign(0, -1), 1e-9, 0.5, 1} {
		if asynqlock.WithRetryJitter(frac) == nil {
			t.Fatalf("WithRetryJitter(%v) = nil", frac)
		}
	}
}
