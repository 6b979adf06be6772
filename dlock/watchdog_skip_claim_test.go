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

// A handed-off lock holds the releaser's 300 ms claim lease until the watchdog renews it, a
// third into the claim lease. If a Refresh is in flight then, the watchdog skips the lease and
// must come back to it within what is left of the claim lease (not after a twentieth of the
// 30 s lease): when that Refresh fails, the watchdog's renewal still keeps the lock.
func TestSkippedHandOffRenewalComesInTime(t *testing.T) {
	lk, ctx := handedOffLock(t, func(b backend) backend { return &failingRefresh{backend: b} }, nil)
	lk.l.mu.Lock()
	confirm := lk.l.confirm
	lk.l.mu.Unlock()
	if !confirm {
		t.Fatal("not handed off awaiting confirmation: the scenario was not reached")
	}
	rctx, rcancel := context.WithTimeout(context.WithValue(ctx, refreshMark{}, true), 150*time.Millisecond)
	defer rcancel()
	rerr := lk.Refresh(rctx, 30*time.Second)
	t.Logf("Refresh: %v", rerr)
	time.Sleep(time.Second) // three claim leases
	if err := lk.Err(); err != nil {
		t.Fatalf("handed-off lock lost after a Refresh that failed while the watchdog's "+
			"confirmation was due: %v", err)
	}
}
