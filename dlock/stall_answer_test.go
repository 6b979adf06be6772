package dlock_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// Redis stalls (SIGSTOP) past the lease while the first look of an acquisition of a free key
// is on its way: the script runs when Redis resumes, and its answer comes after the lease it
// granted has run out on the caller's clock. Such a lock is not handed out already lost, nor
// left held in Redis for nobody until its lease ends: it is freed at once; a TryAcquire is
// ErrUnavailable, an Acquire looks again and returns a lock that is live.
func TestAcquireAnsweredPastItsLease(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "TryAcquire"
		if wait {
			name = "Acquire"
		}
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			const lease = time.Second
			c := newClient(t, srv.Client(t), dlock.WithLease(lease))
			other := newClient(t, srv.Client(t), dlock.WithLease(lease))
			ctx := testContext(t, 30*time.Second)
			key := uniqueKey(t)
			warm, err := c.TryAcquire(ctx, key+"-warm") // a connection and the scripts loaded
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			pid := srv.PID()
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
			type result struct {
				lk  *dlock.Lock
				err error
			}
			got := make(chan result, 1)
			go func() {
				var r result
				if wait {
					r.lk, r.err = c.Acquire(ctx, key)
				} else {
					r.lk, r.err = c.TryAcquire(ctx, key)
				}
				got <- r
			}()
			time.Sleep(lease + 300*time.Millisecond) // a deliberate window: Redis stopped past the lease
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if !wait {
				if !errors.Is(r.err, dlock.ErrUnavailable) {
					t.Fatalf("TryAcquire answered past its lease: %v, %v; want ErrUnavailable", r.lk, r.err)
				}
				// Freed in Redis: another client takes it at once.
				lk, err := other.TryAcquire(ctx, key)
				if err != nil {
					t.Fatalf("the lock answered late was left held: another client's TryAcquire: %v", err)
				}
				_ = lk.Release(ctx)
				return
			}
			if r.err != nil {
				t.Fatalf("Acquire answered past its lease: %v; want it to look again and obtain", r.err)
			}
			if err := r.lk.Err(); err != nil {
				t.Fatalf("Acquire returned a lock already lost: %v", err)
			}
			if ctx := dlock.WithLock(ctx, r.lk); ctx.Err() != nil {
				t.Fatalf("the returned lock's context is done at once: %v", ctx.Err())
			}
			// It is held in Redis by the returned lock: another client is refused, and the
			// release frees it.
			if _, err := other.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
				t.Fatalf("another client's TryAcquire while the lock is held: %v, want ErrNotObtained", err)
			}
			if err := r.lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lk, err := other.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("after the release: %v", err)
			}
			_ = lk.Release(ctx)
		})
	}
}
