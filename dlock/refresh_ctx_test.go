package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// slowRenew stands in for a Redis that does not answer renewals (a network stall): every
// renew call returns only when its context ends, as go-redis does for a call whose context
// has a deadline before its ReadTimeout.
type slowRenew struct {
	backend
	once      sync.Once
	inBatch   chan struct{}
	batchOver chan struct{} // closed when the first renew (the watchdog's batch) returns
	start     time.Time
}

func (b *slowRenew) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	first := false
	b.once.Do(func() { first = true; close(b.inBatch) }) // the first renew is the watchdog's batch
	dl, _ := ctx.Deadline()
	logf("renew of %d lease(s) at %v, deadline in %v", len(rs), time.Since(b.start).Round(time.Millisecond), time.Until(dl).Round(time.Millisecond))
	<-ctx.Done()
	if first {
		close(b.batchOver)
	}
	return nil, unavailable("renew", ctx.Err())
}

var logf = func(string, ...any) {}

// Refresh with a 100 ms context gives up when its context ends, also while it waits for the
// watchdog's batch renewal of the same lease (bounded only by a third of the lease) to be
// over: it returns while that batch is still in flight.
func TestRefreshHeedsContextDuringWatchdogBatch(t *testing.T) {
	sb := &slowRenew{inBatch: make(chan struct{}), batchOver: make(chan struct{}), start: time.Now()}
	c, _, ctx := testClient(t, 6*time.Second, // batch due at ~1.4 s, timeout 2 s
		func(b backend) backend { sb.backend = b; return sb })
	logf = t.Logf
	lk, err := c.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()

	<-sb.inBatch
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer rcancel()
	start := time.Now()
	err = lk.Refresh(rctx, 10*time.Second)
	took := time.Since(start)
	t.Logf("Refresh with a 100 ms context returned after %v: %v", took, err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refresh = %v, want an error matching context.DeadlineExceeded", err)
	}
	select {
	case <-sb.batchOver:
		t.Fatalf("Refresh with a 100 ms context returned after %v, once the watchdog's batch was over: "+
			"it waited for the batch holding lease.renewing", took)
	default:
	}
}
