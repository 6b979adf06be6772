package dlock

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// A lease handed to a closed watchdog (a release that turned out not to be the last, after
// Close began) ends at once, on the caller's goroutine: nothing is left running that Close,
// waiting already, would not wait for.
func TestWatchdogAddAfterCloseEndsLeaseAtOnce(t *testing.T) {
	cfg := config{lease: DefaultLease, retry: DefaultRetryInterval, prefix: DefaultPrefix}
	c := &Client{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	c.tel = newTelemetry(&cfg)
	c.wd = newWatchdog(c)
	c.wd.close()

	l := newLease(c, "k", "o", 1, time.Minute, true)
	c.wd.add(l)
	l.mu.Lock()
	ended, cause := l.ended, l.cause
	l.mu.Unlock()
	if !ended {
		t.Fatal("lease still live when add returned on a closed watchdog")
	}
	if !errors.Is(cause, ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	c.wd.mu.Lock()
	defer c.wd.mu.Unlock()
	if len(c.wd.leases) != 0 {
		t.Fatalf("%d leases watched by a closed watchdog", len(c.wd.leases))
	}
}

// A Refresh given up by its context leaves its call's answer to be applied when it comes (see
// TestRefreshLateAnswerCounts). Close waits for that, as for the watchdog's own late answers:
// nothing of the Client runs on after Close returns.
func TestCloseWaitsForRefreshLateAnswer(t *testing.T) {
	held := &heldAnswers{answer: make(chan struct{})}
	c, _, ctx := testClient(t, DefaultLease, func(b backend) backend { held.backend = b; return held })

	lk, err := c.Acquire(ctx, t.Name(), WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer rcancel()
	if err := lk.Refresh(rctx, time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Refresh given up on its way: %v, want ErrUnavailable", err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = c.Close()
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while the answer of a Refresh was still to be applied")
	case <-time.After(200 * time.Millisecond):
	}
	close(held.answer)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the Refresh's answer came")
	}
}
