package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A lease held for long while many short requests each bind a context keeps only the live
// ones: the ended ones are dropped as the list grows.
func TestLeaseBindDropsEndedContexts(t *testing.T) {
	l := newLease(nil, "k", "o", 1, time.Minute, false)
	live, cancelLive := context.WithCancelCause(context.Background())
	defer cancelLive(nil)
	l.bind(bound{ctx: live, cancel: cancelLive})
	for range 1000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		l.bind(bound{ctx: ctx, cancel: cancel})
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

// A lease whose local deadline has passed before acquire hands it to the watchdog ends from
// its expiry timer, possibly before watchdog.add: acquire checks the answer against the
// deadline first, but the goroutine can be descheduled (preemption, GC assist, contention on
// watchdog.mu) between that check and add. The watchdog must not take such a lease in:
// nothing would take it out again, and it would renew the key for an owner that was told the
// lock is lost, for as long as the process lives.
func TestEndedLeaseIsNotWatched(t *testing.T) {
	const lease = 300 * time.Millisecond
	c, _, _ := testClient(t, lease, nil)
	l := newLease(c, t.Name(), "owner", 1, lease, true)
	l.start(time.Now().Add(-time.Second), lease) // its deadline passed already: the expiry fires at once
	<-l.done()
	if !errors.Is(l.err(), ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", l.err())
	}
	if !c.hold(l) {
		t.Fatal("hold refused a lease before Close")
	}
	c.wd.mu.Lock()
	_, watched := c.wd.leases[l]
	c.wd.mu.Unlock()
	if watched {
		t.Fatal("the watchdog took in a lease that had ended: it would renew it for nobody")
	}
}

// testClient is a Client with lease on a fresh Redis, closed when the test ends, whose
// backend wrap replaces (nil: as is), and a context for the test.
func testClient(t *testing.T, lease time.Duration, wrap func(backend) backend) (*Client, *redistest.Server, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	c := New(srv.Client(t), WithLease(lease))
	t.Cleanup(func() { _ = c.Close() })
	if wrap != nil {
		c.be = wrap(c.be)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c, srv, ctx
}

// refreshMark marks the context of the Refresh that gateBackend holds back.
type refreshMark struct{}

// gateBackend holds a marked Refresh's renewal until released and counts the renewals sent
// for the lock while that one is in flight.
type gateBackend struct {
	backend
	refreshIn, open chan struct{}
	inRefresh       atomic.Bool
	crossing        atomic.Int64
}

func (b *gateBackend) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	if ctx.Value(refreshMark{}) == nil {
		if b.inRefresh.Load() {
			b.crossing.Add(1)
		}
		return b.backend.renew(ctx, rs)
	}
	b.inRefresh.Store(true)
	defer b.inRefresh.Store(false)
	close(b.refreshIn)
	<-b.open
	return b.backend.renew(ctx, rs)
}

// While a Refresh is in flight the watchdog does not renew the same lock: with two renewals
// crossing, the lease on our clock would follow the reply that came last, not the renewal
// Redis applied last, and could outlast the lock in Redis. Nor does it spin on the skipped
// lease: a retry is not batched early (collect's ttl/10 slack), or it would be due again at
// once. The watchdog takes the lease up again after the Refresh.
func TestRefreshAndWatchdogDoNotCross(t *testing.T) {
	gb := &gateBackend{refreshIn: make(chan struct{}), open: make(chan struct{})}
	c, _, ctx := testClient(t, 1500*time.Millisecond, // renewed every 500 ms
		func(b backend) backend { gb.backend = b; return gb })
	lk, err := c.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	refreshed := make(chan error, 1)
	go func() { refreshed <- lk.Refresh(context.WithValue(ctx, refreshMark{}, true), 2*time.Second) }()
	<-gb.refreshIn
	// The watchdog's renewal comes due (~350 ms after the Acquire) while the Refresh is in
	// flight: it skips the lease, which it then retries later.
	skipped := func() bool {
		lk.l.mu.Lock()
		defer lk.l.mu.Unlock()
		return lk.l.retrying
	}
	if !waitFor(10*time.Second, skipped) {
		t.Fatal("the watchdog never came to the lease while the Refresh was in flight")
	}
	renewAt := func() time.Time {
		lk.l.mu.Lock()
		defer lk.l.mu.Unlock()
		return lk.l.renewAt
	}
	skips, last := 0, renewAt()
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		if at := renewAt(); !at.Equal(last) {
			skips, last = skips+1, at
		}
	}
	close(gb.open)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	if n := gb.crossing.Load(); n != 0 {
		t.Fatalf("the watchdog sent %d renewals while the Refresh was in flight", n)
	}
	if skips > 20 { // one retry per ttl/20 (75 ms) makes about 3
		t.Fatalf("the watchdog skipped the lease %d times in 200 ms: it spins while a Refresh is in flight", skips)
	}
	time.Sleep(2500 * time.Millisecond) // past the Refresh's 2 s lease: renewals resumed
	if err := lk.Err(); err != nil {
		t.Fatalf("lock lost after the Refresh: %v", err)
	}
}

// failRenew fails the next n renewals.
type failRenew struct {
	backend
	n atomic.Int32
}

func (b *failRenew) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	if b.n.Add(-1) >= 0 {
		return nil, errors.New("injected renewal failure")
	}
	return b.backend.renew(ctx, rs)
}

// handedOffLock returns a lock obtained by hand-off, on a Client whose backend wrap returns
// (nil: as is), with a 30 s lease; the releasing Client's claim lease is 300 ms. before runs
// while the waiter is in line, just before the release that hands it the lock.
func handedOffLock(t *testing.T, wrap func(backend) backend, before func()) (*Lock, context.Context) {
	t.Helper()
	return handedOffLockWith(t, 100*time.Millisecond, DefaultLease, wrap, before)
}

// handedOffLockWith is handedOffLock with a releasing Client whose retry interval is retry
// (its claim lease three of them), and a waiting Client whose lease is lease.
func handedOffLockWith(t *testing.T, retry, lease time.Duration, wrap func(backend) backend, before func()) (*Lock, context.Context) {
	t.Helper()
	srv := redistest.Start(t)
	releaser := New(srv.Client(t), WithRetryInterval(retry))
	t.Cleanup(func() { _ = releaser.Close() })
	waiter := New(srv.Client(t), WithLease(lease))
	t.Cleanup(func() { _ = waiter.Close() })
	if wrap != nil {
		waiter.be = wrap(waiter.be)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	held, err := releaser.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lk, err := waiter.Acquire(ctx, t.Name())
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	for n := int64(0); n == 0; n, _ = srv.Client(t).ZCard(ctx, "lockguard:{"+t.Name()+"}:q").Result() {
		time.Sleep(5 * time.Millisecond)
	}
	if before != nil {
		before()
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk, ctx
}

// A handed-off lock holds only the releaser's short claim lease until its new holder renews
// it. One failed renewal must not lose it: the watchdog tries again within what is left of
// the claim lease, not after a twentieth of the full lease (6 s of 2 min, past a 3 s claim).
// The claim lease is seconds long, so that a slow machine does not lose it either way.
func TestHandedOffLockSurvivesOneFailedRenewal(t *testing.T) {
	fr := &failRenew{}
	lk, _ := handedOffLockWith(t, time.Second, 2*time.Minute, func(b backend) backend { fr.backend = b; return fr },
		func() { fr.n.Store(1) }) // the new holder's first renewal fails
	if !confirmedOrLost(lk) {
		t.Fatalf("handed-off lock lost after one failed renewal: %v", lk.Err())
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("handed-off lock lost after one failed renewal: %v", err)
	}
	if fr.n.Load() >= 0 {
		t.Fatal("the injected failure was not reached: no renewal happened")
	}
}

// confirmedOrLost waits until a handed-off lease is confirmed by a renewal of the watchdog
// (true) or ends (false).
func confirmedOrLost(lk *Lock) bool {
	for {
		lk.l.mu.Lock()
		confirm := lk.l.confirm
		lk.l.mu.Unlock()
		if !confirm {
			return true
		}
		select {
		case <-lk.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// reentryFirst makes a re-entry's script run in Redis before the outer hold's release
// script, while the re-entry's reply (and so its local hold count) is held back until open.
type reentryFirst struct {
	backend
	reentered, open chan struct{}
}

func (b *reentryFirst) reenter(ctx context.Context, r reentryRequest) (int, []byte, error) {
	n, rec, err := b.backend.reenter(ctx, r)
	close(b.reentered)
	<-b.open
	return n, rec, err
}

func (b *reentryFirst) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	if r.entry == "1" {
		<-b.reentered
	}
	return b.backend.release(ctx, r)
}

// A re-entry (from a goroutine given the WithLock context) whose script reaches Redis just
// before the outer Release's: the server answers "1 hold left", so the release was not the
// last one after all. The re-entrant hold must go on being renewed, not be lost at the end of
// the lease while its holder is alive and Redis is healthy.
func TestReentryDuringReleaseKeepsRenewal(t *testing.T) {
	rf := &reentryFirst{reentered: make(chan struct{}), open: make(chan struct{})}
	const lease = 1500 * time.Millisecond // renewed every 500 ms
	c, _, ctx := testClient(t, lease, func(b backend) backend { rf.backend = b; return rf })
	outer, err := c.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *Lock
		err error
	}
	inner := make(chan result, 1)
	go func() {
		lk, err := c.Acquire(WithLock(ctx, outer), t.Name()) // re-entry
		inner <- result{lk, err}
	}()
	<-rf.reentered
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer Release: %v", err)
	}
	close(rf.open)
	r := <-inner
	if r.err != nil {
		t.Fatalf("re-entry: %v", r.err)
	}
	defer func() { _ = r.lk.Release(ctx) }()
	// Renewed: its deadline moves on, twice (a lease not watched would end at the first).
	deadline := func() time.Time {
		r.lk.l.mu.Lock()
		defer r.lk.l.mu.Unlock()
		return r.lk.l.deadline
	}
	for last, n := deadline(), 0; n < 2; {
		select {
		case <-r.lk.Done():
			t.Fatalf("re-entrant hold lost while held, Redis healthy, after %d renewals: %v", n, r.lk.Err())
		case <-ctx.Done():
			t.Fatalf("re-entrant hold not renewed: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
		if d := deadline(); d.After(last) {
			last, n = d, n+1
		}
	}
	if err := r.lk.Err(); err != nil {
		t.Fatalf("re-entrant hold lost while held, Redis healthy: %v", err)
	}
}
