package dlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// lostReenterReply runs the re-entry script but loses its reply (a connection reset after
// the script ran, or a deadline while the call was in flight), holds the clean-up release of
// that re-entry hold (dropHold, a background call on another connection) until gate closes,
// and records when each renewal was sent.
type lostReenterReply struct {
	backend
	gate    chan struct{}
	dropped chan error // the clean-up release of the re-entry hold, once it got through

	mu      sync.Mutex
	sent    []time.Time   // when each renewal was sent
	renewed chan struct{} // a signal after each renewal is recorded
}

func (b *lostReenterReply) reenter(ctx context.Context, r reentryRequest) (int, []byte, error) {
	if _, _, err := b.backend.reenter(ctx, r); err != nil {
		return 0, nil, err
	}
	return 0, nil, unavailable("reenter", errors.New("injected: reply lost after the script ran"))
}

func (b *lostReenterReply) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	if r.entry == "1" {
		return b.backend.release(ctx, r)
	}
	<-b.gate
	res, err := b.backend.release(ctx, r)
	select {
	case b.dropped <- err:
	default:
	}
	return res, err
}

func (b *lostReenterReply) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	b.mu.Lock()
	b.sent = append(b.sent, time.Now())
	b.mu.Unlock()
	select {
	case b.renewed <- struct{}{}:
	default:
	}
	return b.backend.renew(ctx, rs)
}

// renewals returns when the renewals sent so far were sent.
func (b *lostReenterReply) renewals() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.sent...)
}

// Release of the only hold the caller knows of, while Redis still counts the hold a failed
// re-entry added (its dropHold clean-up has not run yet), answers "holds left", and the lease
// is watched again. No hold is left locally, so the watchdog must not renew it back to back:
// it retries later (retryLater: at least 10 ms after the previous answer), and the clean-up
// ends the lease once it frees the lock, which takes it out of the watchdog.
//
// The clean-up is held back until the watchdog has renewed the re-added lease a few times,
// so the spin, if there is one, happens while the test watches: a renewal sent less than
// 10 ms after the previous one is one retryLater does not allow. Slowness only widens the
// gaps, so the check cannot fail on a slow machine; a spin sends them a round trip apart.
func TestReleasedLeaseDoesNotSpinWatchdog(t *testing.T) {
	const (
		renewals = 5                     // renewals of the released lease watched: 4 gaps
		minGap   = 10 * time.Millisecond // retryLater's floor
	)
	fb := &lostReenterReply{gate: make(chan struct{}), dropped: make(chan error, 1), renewed: make(chan struct{}, 1)}
	// Lease 3 s: the re-added lease is due ~1 s after the Release, then retried every
	// ~150 ms (a twentieth of the lease) until its local expiry, ~3 s after the Acquire.
	c, srv, ctx := testClient(t, 3*time.Second,
		func(b backend) backend { fb.backend = b; return fb })
	key := t.Name()
	var openGate sync.Once
	open := func() { openGate.Do(func() { close(fb.gate) }) }
	t.Cleanup(open) // a failure with the clean-up held back must not hold up Close

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(WithLock(ctx, lk), key); err == nil {
		t.Fatal("re-entry succeeded; the injection did not apply")
	}
	// The outer hold is released before the background dropHold gets through.
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := lk.l
	c.wd.mu.Lock()
	_, watched := c.wd.leases[l]
	c.wd.mu.Unlock()
	if !watched || l.err() != nil || !l.releasing() {
		t.Fatalf("after the Release: watched %v, lease error %v, released %v; want a released lease "+
			"watched again (Redis still counts the re-entry hold)", watched, l.err(), l.releasing())
	}
	start := len(fb.renewals())

	// The released lease's renewals, the clean-up held back.
	for len(fb.renewals())-start < renewals {
		select {
		case <-fb.renewed:
		case <-l.done():
			t.Fatalf("the released lease ended (%v) after %d renewals, before the watchdog renewed it %d times",
				l.err(), len(fb.renewals())-start, renewals)
		case <-ctx.Done():
			t.Fatalf("the watchdog renewed the released lease %d times, want %d", len(fb.renewals())-start, renewals)
		}
	}
	checkGaps := func(when string) {
		t.Helper()
		sent := fb.renewals()[start:]
		for i := 1; i < len(sent); i++ {
			if gap := sent[i].Sub(sent[i-1]); gap < minGap {
				t.Fatalf("%s: renewal %d of the released lease sent %v after the previous one (%d renewals "+
					"watched), less than retryLater's %v: the watchdog spins on a lease re-added after Release",
					when, i+1, gap, len(sent), minGap)
			}
		}
	}
	checkGaps("clean-up held back")

	open() // dropHold now removes the re-entry hold: the lock is free in Redis
	select {
	case err := <-fb.dropped:
		if err != nil {
			t.Fatalf("the clean-up release of the re-entry hold: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the clean-up release of the re-entry hold never got through")
	}
	if owner, _ := srv.Client(t).HGet(ctx, "lockguard:{"+key+"}:lock", "o").Result(); owner != "" {
		t.Fatalf("lock still owned by %q after both holds were removed", owner)
	}
	select {
	case <-l.done():
	case <-ctx.Done():
		t.Fatal("the lease did not end once the clean-up freed the lock")
	}
	if err := l.err(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("the lease ended with %v, want ErrNotHeld (freed by the clean-up)", err)
	}
	c.wd.mu.Lock()
	_, watched = c.wd.leases[l]
	c.wd.mu.Unlock()
	if watched {
		t.Fatal("the ended lease is still watched: the watchdog would go on renewing it")
	}
	checkGaps("until the end") // a batch claimed before the end may still have been sent
}
