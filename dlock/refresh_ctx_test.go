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
	once    sync.Once
	inBatch chan struct{}
	start   time.Time
}

func (b *slowRenew) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	b.once.Do(func() { close(b.inBatch) }) // the first renew is the watchdog's batch
	dl, _ := ctx.Deadline()
	logf("renew of %d lease(s) at %v, deadline in %v", len(rs), time.Since(b.start).Round(time.Millisecond), time.Until(dl).Round(time.Millisecond))
	<-ctx.Done()
	return nil, unavailable("renew", ctx.Err())
}

var logf = func(string, ...any) {}

// Refresh with a 100 ms context gives up after 100 ms, also while it waits for the watchdog's
// batch renewal of the same lease (bounded only by a third of the lease) to be over.
func TestRefreshHeedsContextDuringWatchdogBatch(t *testing.T) {
	sb := &slowRenew{inBatch: make(chan struct{}), start: time.Now()}
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
	if took > 500*time.Millisecond {
		t.Fatalf("Refresh with a 100 ms context took %v: it waited for the watchdog's batch "+
			"holding lease.renewing", took)
	}
}
