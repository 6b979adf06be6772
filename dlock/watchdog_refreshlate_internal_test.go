package dlock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A Refresh given up by its context while its call goes on reports the outcome unknown and
// counts on the shorter lease; the answer that comes later counted for nothing: Redis had the
// lock for the new ttl, and the holder lost it at the end of the old lease. The answer counts
// now, as the watchdog's late answers do.
func TestRefreshLateAnswerCounts(t *testing.T) {
	held := &heldAnswers{answer: make(chan struct{})}
	c, _, ctx := testClient(t, DefaultLease, func(b backend) backend { held.backend = b; return held })

	const old, ttl = time.Second, time.Minute
	lk, err := c.Acquire(ctx, t.Name(), WithTTL(old)) // not renewed: only Refresh renews it
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	rctx, rcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer rcancel()
	if err := lk.Refresh(rctx, ttl); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Refresh given up on its way: %v, want ErrUnavailable", err)
	}
	close(held.answer) // Redis renewed the lock for ttl: the answer comes now
	renewed := waitFor(5*time.Second, func() bool {
		lk.l.mu.Lock()
		defer lk.l.mu.Unlock()
		return time.Until(lk.l.deadline) > ttl/2
	})
	if !renewed {
		t.Fatalf("the late answer of a Refresh that Redis applied did not renew the lease (Err %v)", lk.Err())
	}
	if err := lk.Err(); err != nil {
		t.Fatal(err)
	}
}

// slowAnswer applies every renewal at once and returns its answer only once after is closed.
type slowAnswer struct {
	backend
	after <-chan struct{}
}

func (b *slowAnswer) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	ok, err := b.backend.renew(ctx, rs)
	<-b.after
	return ok, err
}

// A Refresh that Redis applied in time but whose answer came after the lease ended on the
// holder's clock returned nil, though the lock was lost (Err said so), and Redis held it for
// the new ttl for nobody. It reports the loss, and the lock is freed in Redis.
func TestRefreshAnsweredPastDeadlineReportsLossAndFrees(t *testing.T) {
	slow := &slowAnswer{}
	c, srv, ctx := testClient(t, DefaultLease, func(b backend) backend { slow.backend = b; return slow })
	other := New(srv.Client(t))
	defer other.Close()

	const ttl = time.Minute
	key := t.Name()
	lk, err := c.Acquire(ctx, key, WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	slow.after = lk.Done() // answered once the lease has ended on our clock
	err = lk.Refresh(ctx, ttl)
	if !errors.Is(err, ErrLockLost) {
		t.Fatalf("Refresh answered after the lease ended: %v, want an error matching ErrLockLost", err)
	}
	var lk2 *Lock
	freed := waitFor(5*time.Second, func() bool {
		lk2, err = other.TryAcquire(ctx, key)
		return err == nil
	})
	if !freed {
		t.Fatalf("the lock, lost by its holder, is still held in Redis for the Refresh's %v: %v", ttl, err)
	}
	if err := lk2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
