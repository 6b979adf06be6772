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
