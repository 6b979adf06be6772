package dlock

import (
	"context"
	"testing"
	"time"
)

// A lease held for long while many short requests each bind a context keeps only the live
// ones: the ended ones are dropped as the list grows.
func TestLeaseBindDropsEndedContexts(t *testing.T) {
	l := newLease(nil, "k", "o", 1, time.Minute, false)
	live, cancelLive := context.WithCancelCause(context.Background())
	defer cancelLive(nil)
	l.bind(live, cancelLive)
	for range 1000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		l.bind(ctx, cancel)
		cancel(nil)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.bound); n > 64 {
		t.Fatalf("%d contexts bound after 1000 ended ones and 1 live, want a few", n)
	}
	for _, b := range l.bound {
		if b.ctx == live {
			return
		}
	}
	t.Fatal("the live context was dropped")
}

// A call runs in a goroutine of its own only when it could go on well past its context: the
// client does not end calls at the context's deadline, and its read timeout would not end the
// call before that deadline (or it has none). Every other call runs in the caller's goroutine.
func TestCallNeedsGoroutine(t *testing.T) {
	never := context.Background()
	cancellable, cancel := context.WithCancel(never)
	defer cancel()
	soon, cancelSoon := context.WithTimeout(never, time.Second)
	defer cancelSoon()
	late, cancelLate := context.WithTimeout(never, time.Minute)
	defer cancelLate()
	for _, tc := range []struct {
		name        string
		ctxTimeouts bool
		readTimeout time.Duration
		ctx         context.Context
		want        bool
	}{
		{"context that cannot end", false, 5 * time.Second, never, false},
		{"cancellable, no deadline, read timeout", false, 5 * time.Second, cancellable, false},
		{"deadline before the read timeout", false, 5 * time.Second, soon, true},
		{"deadline after the read timeout", false, 5 * time.Second, late, false},
		{"no read timeout, cancellable", false, 0, cancellable, true},
		{"no read timeout, deadline", false, -1, late, true},
		{"no read timeout, cannot end", false, 0, never, false},
		{"ContextTimeoutEnabled", true, 5 * time.Second, soon, false},
		{"ContextTimeoutEnabled, no read timeout", true, 0, cancellable, false},
	} {
		b := &redisBackend{ctxTimeouts: tc.ctxTimeouts, readTimeout: tc.readTimeout}
		if got := b.mayOutlive(tc.ctx); got != tc.want {
			t.Errorf("%s: mayOutlive = %v, want %v", tc.name, got, tc.want)
		}
	}
}
