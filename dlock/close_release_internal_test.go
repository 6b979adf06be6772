package dlock

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// failFirstInnerRelease fails the first release of a re-entrant hold before it reaches Redis,
// as a connection that breaks as the call is written does.
type failFirstInnerRelease struct {
	backend
	once sync.Once
}

func (b *failFirstInnerRelease) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	failed := false
	if r.entry != "1" {
		b.once.Do(func() { failed = true })
	}
	if failed {
		return releaseResult{}, unavailable("release", errors.New("injected: connection broke before the call was sent"))
	}
	return b.backend.release(ctx, r)
}

// A re-entrant hold whose Release fails before its script reaches Redis is taken off in the
// background: the outer Release then frees the key, which is not left locked and renewed
// with nobody able to release it.
func TestFailedInnerReleaseStillFreesKey(t *testing.T) {
	const lease = 900 * time.Millisecond
	c, srv, ctx := testClient(t, lease, func(b backend) backend { return &failFirstInnerRelease{backend: b} })
	rdb := srv.Client(t)
	key := t.Name()
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(WithLock(ctx, outer), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Release(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("inner Release with the injected failure = %v, want ErrUnavailable", err)
	}
	if err := inner.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("inner Release retried = %v", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer Release = %v", err)
	}
	if n := outer.HoldCount(); n != 0 {
		t.Fatalf("HoldCount after every hold was released: %d", n)
	}
	other := New(rdb)
	defer other.Close()
	// Every hold the caller has was released: the key must be free, at the latest when the
	// lease taken before the release runs out. Nothing renews it after the release: its PTTL
	// in Redis never goes up, which only a renewal makes it do; so it ends within that lease
	// on Redis's clock, and the wall-clock wait below, several leases, is only a backstop.
	lockKey := "lockguard:{" + key + "}:lock"
	last := rdb.PTTL(ctx, lockKey).Val()
	deadline := time.Now().Add(5 * lease)
	for {
		lk, err := other.TryAcquire(ctx, key)
		if err == nil {
			_ = lk.Release(ctx)
			return
		}
		o, _ := rdb.HGet(ctx, lockKey, "o").Result()
		h, _ := rdb.HGet(ctx, lockKey, "h").Result()
		pttl, _ := rdb.PTTL(ctx, lockKey).Result()
		if pttl > last {
			t.Fatalf("every hold released (outer Release returned nil), yet the lock is renewed in "+
				"Redis (PTTL %v, then %v): owner ours=%v h=%s, Done closed=%v Err=%v; other client: %v",
				last, pttl, o == outer.l.owner, h, isClosed(outer.Done()), outer.Err(), err)
		}
		last = pttl
		if time.Now().After(deadline) {
			t.Fatalf("every hold released (outer Release returned nil), yet %v later the key is "+
				"still locked: owner ours=%v h=%s pttl=%v, Done closed=%v Err=%v; other client: %v",
				5*lease, o == outer.l.owner, h, pttl, isClosed(outer.Done()), outer.Err(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close ends a wait in progress with ErrClosed; the waiter does not go on to take the lock
// for a Client nobody can use any more.
func TestCloseEndsWaits(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	holder := New(rdb)
	defer holder.Close()
	c := New(rdb, WithRetryInterval(200*time.Millisecond))
	defer c.Close()
	ctx, cancelCtx := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelCtx()
	key := t.Name()
	held, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := goAcquire(func() (*Lock, error) { return c.Acquire(ctx, key) })
	qkey := "lockguard:{" + key + "}:q"
	if !waitFor(5*time.Second, func() bool { n, _ := rdb.ZCard(ctx, qkey).Result(); return n == 1 }) {
		t.Fatal("waiter not queued")
	}
	if !waitFor(5*time.Second, func() bool { return numSub(t, rdb, "lockguard:{"+key+"}:ch") >= 1 }) {
		t.Fatal("waiter not subscribed") // subscribed and waiting
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("wait ended by Close: %v, want ErrClosed", r.err)
		}
		return
	case <-time.After(1500 * time.Millisecond):
	}
	// The wait outlived Close (a failure): show what it does once the holder releases.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r lockResult
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("wait neither ended by Close nor by the release")
	}
	msg := "Acquire still waiting 1.5 s after Close"
	if r.err != nil {
		t.Fatalf("%s; after the release it returned %v", msg, r.err)
	}
	<-r.lk.Done() // ended by the closed watchdog
	rerr := r.lk.Release(ctx)
	lockKey := "lockguard:{" + key + "}:lock"
	o, _ := rdb.HGet(ctx, lockKey, "o").Result()
	pttl, _ := rdb.PTTL(ctx, lockKey).Result()
	_, oerr := holder.TryAcquire(ctx, key)
	t.Fatalf("%s; then it obtained the lock on the closed Client (token %d, Err %v); its "+
		"Release = %v; Redis still has it as that owner: %v (pttl %v); another client's TryAcquire: %v",
		msg, r.lk.Token(), r.lk.Err(), rerr, o == r.lk.l.owner && o != "", pttl, oerr)
}

// Refresh on a WithTTL lock obtained by hand-off: the confirmation renewal the watchdog had
// planned must not set the lease back to the acquisition's TTL after the Refresh.
func TestRefreshOfHandedOffTTLLockHolds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	releaser := New(rdb) // claim lease 3 s
	defer releaser.Close()
	waiter := New(rdb)
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := t.Name()
	held, err := releaser.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lk, err := waiter.Acquire(ctx, key, WithTTL(2*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	qkey := "lockguard:{" + key + "}:q"
	if !waitFor(5*time.Second, func() bool { n, _ := rdb.ZCard(ctx, qkey).Result(); return n == 1 }) {
		t.Fatal("waiter not queued")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk := <-got
	if lk == nil {
		t.FailNow()
	}
	defer func() { _ = lk.Release(ctx) }()
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond) // past the 2 s TTL, and past the claim lease
	lockKey := "lockguard:{" + key + "}:lock"
	pttl, _ := rdb.PTTL(ctx, lockKey).Result()
	if err := lk.Err(); err != nil || pttl < 30*time.Second {
		t.Fatalf("Refresh(1m) succeeded, yet 3.5 s later: Err = %v, PTTL in Redis %v", err, pttl)
	}
}

// A Refresh that shortens the lease and whose context ends while Redis is stalled has an
// unknown outcome: Redis may apply it when it resumes. The holder then counts on the shorter
// lease, so it never believes it holds a lock Redis has let go to someone else.
func TestAbandonedShorteningRefreshCountsShortLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := New(rdb)
	defer c.Close()
	other := New(rdb)
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := t.Name()
	lk, err := c.Acquire(ctx, key, WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	if err := lk.Refresh(ctx, 10*time.Second); err != nil { // loads the renew script
		t.Fatal(err)
	}
	if err := srv.Pause(ctx, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	rerr := lk.Refresh(rctx, 300*time.Millisecond)
	rcancel()
	t.Logf("Refresh with a context ending mid-call: %v", rerr)
	if rerr == nil {
		t.Skip("Refresh succeeded: scenario not reached")
	}
	time.Sleep(time.Second) // pause over (0.5 s), then the late 300 ms lease ran out
	lk2, err := other.TryAcquire(ctx, key)
	if err != nil {
		return // still ours in Redis: fine
	}
	defer func() { _ = lk2.Release(ctx) }()
	if lk.Err() == nil {
		t.Fatalf("two holders: the first holder's lock reports held (Err nil) while another "+
			"client holds the key (token %d > %d)", lk2.Token(), lk.Token())
	}
}

// An acquisition in flight when Close is called returns ErrClosed and frees the lock it got
// in Redis, rather than return a dead Lock while the key stays locked for the whole lease.
// Its script is held on its way to Redis (in the connection's write) until Close has begun.
func TestAcquireInFlightAtCloseFreesKey(t *testing.T) {
	srv := redistest.Start(t)
	key := t.Name()
	var armed atomic.Bool
	sending, send := make(chan struct{}), make(chan struct{})
	n := &testNet{stall: func(p []byte) time.Duration {
		if bytes.Contains(p, []byte("{"+key+"}")) && armed.CompareAndSwap(true, false) {
			close(sending)
			<-send
		}
		return 0
	}}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	c := New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := c.Completed(ctx, key); err != nil { // a connection in the pool
		t.Fatal(err)
	}
	armed.Store(true)
	got := goAcquire(func() (*Lock, error) { return c.TryAcquire(context.Background(), key) })
	select {
	case <-sending: // the script is on its way
	case <-ctx.Done():
		close(send)
		t.Fatal("the TryAcquire never sent its script")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if !waitFor(10*time.Second, c.closed.Load) {
		close(send)
		t.Fatal("Close did not begin")
	}
	close(send) // Redis runs the script, and answers, only now
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	r := <-got
	t.Logf("TryAcquire in flight at Close: %v", r.err)
	other := New(srv.Client(t))
	defer other.Close()
	if r.err == nil {
		<-r.lk.Done() // ended by the closed watchdog
		rerr := r.lk.Release(ctx)
		_, oerr := other.TryAcquire(ctx, key)
		t.Fatalf("TryAcquire in flight at Close returned a lock (Err %v; its Release = %v; another client: %v), want ErrClosed",
			r.lk.Err(), rerr, oerr)
	}
	if !errors.Is(r.err, ErrClosed) {
		t.Fatalf("TryAcquire in flight at Close: %v, want ErrClosed", r.err)
	}
	if _, oerr := other.TryAcquire(ctx, key); oerr != nil {
		pttl, _ := rdb.PTTL(ctx, "lockguard:{"+key+"}:lock").Result()
		t.Fatalf("TryAcquire in flight at Close returned ErrClosed, yet the key stays locked in Redis "+
			"for %v with nobody to release it (another client: %v)", pttl.Round(time.Second), oerr)
	}
}

// lockResult is what an acquisition run in a goroutine returned.
type lockResult struct {
	lk  *Lock
	err error
}

// goAcquire runs acquire in a goroutine; its result arrives on the channel.
func goAcquire(acquire func() (*Lock, error)) <-chan lockResult {
	got := make(chan lockResult, 1)
	go func() {
		lk, err := acquire()
		got <- lockResult{lk, err}
	}()
	return got
}
