package dlock

import (
	"context"
	"testing"
	"time"
)

// failingRefresh: a marked Refresh's renewal gets no answer before its context ends (a
// short Redis stall); other renewals go through.
type failingRefresh struct{ backend }

func (b *failingRefresh) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	if ctx.Value(refreshMark{}) != nil {
		<-ctx.Done()
		return nil, unavailable("renew", ctx.Err())
	}
	return b.backend.renew(ctx, rs)
}

// A handed-off lock holds the releaser's claim lease (3 s here) until the watchdog renews it,
// a third into the claim lease. If a Refresh is in flight then, the watchdog skips the lease
// and must come back to it within what is left of the claim lease (not after a twentieth of
// the 2 min lease, 6 s): when that Refresh fails, the watchdog's renewal still keeps the lock.
// The claim lease is seconds long, so that a slow machine neither misses the overlap (the
// Refresh starts a second before the renewal is due) nor loses the lock either way.
func TestSkippedHandOffRenewalComesInTime(t *testing.T) {
	const claim = 3 * time.Second
	lk, ctx := handedOffLockWith(t, claim/3, 2*time.Minute, func(b backend) backend { return &failingRefresh{backend: b} }, nil)
	lk.l.mu.Lock()
	confirm := lk.l.confirm
	lk.l.mu.Unlock()
	if !confirm {
		t.Fatal("not handed off awaiting confirmation: the scenario was not reached")
	}
	// In flight from now until half the claim lease: across the renewal due at a third.
	rctx, rcancel := context.WithTimeout(context.WithValue(ctx, refreshMark{}, true), claim/2)
	defer rcancel()
	rerr := lk.Refresh(rctx, 30*time.Second)
	t.Logf("Refresh: %v", rerr)
	if !confirmedOrLost(lk) {
		t.Fatalf("handed-off lock lost after a Refresh that failed while the watchdog's "+
			"confirmation was due: %v", lk.Err())
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("handed-off lock lost after a Refresh that failed while the watchdog's "+
			"confirmation was due: %v", err)
	}
}
