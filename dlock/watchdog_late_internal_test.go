package dlock

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// slowRenewals is a Redis server whose renewals (EVALSHA of the renew script, loaded first so
// every renewal is one) are held back by latency on the clients from client while on is set.
type slowRenewals struct {
	srv     *redistest.Server
	plain   *redis.Client // not held back
	latency time.Duration
	on      atomic.Bool

	mu     sync.Mutex
	writes [][]byte // the writes held back
}

func newSlowRenewals(t *testing.T, ctx context.Context, latency time.Duration) *slowRenewals {
	t.Helper()
	s := &slowRenewals{srv: redistest.Start(t), latency: latency}
	s.plain = s.srv.Client(t)
	if _, err := s.plain.ScriptLoad(ctx, luaRenew).Result(); err != nil {
		t.Fatal(err)
	}
	return s
}

// client returns a go-redis client whose renewals are held back, with opts applied.
func (s *slowRenewals) client(t *testing.T, opts ...func(*redis.Options)) *redis.Client {
	n := &testNet{stall: s.stall}
	return s.srv.Client(t, append([]func(*redis.Options){func(o *redis.Options) { o.Dialer = n.dial }}, opts...)...)
}

func (s *slowRenewals) stall(p []byte) time.Duration {
	if !s.on.Load() || !bytes.Contains(p, []byte(scriptRenew.sha)) {
		return 0
	}
	s.mu.Lock()
	s.writes = append(s.writes, bytes.Clone(p))
	s.mu.Unlock()
	return s.latency
}

// held returns the writes held back so far.
func (s *slowRenewals) held() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

// Under a latency past a third of the lease (a loaded machine, a slow link), the watchdog
// gives its call up while it is still on its way. With go-redis's default settings the call
// goes on and Redis renews the lock; the watchdog waits for it anyway (two renewals must not
// cross), and then used to throw the answer away and send the renewal again, with less than
// the latency left of the lease: the holder lost a lock that Redis kept renewing. The late
// answer renews the lease: the lock is held through several leases.
func TestLateRenewalAnswerKeepsLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const (
		lease = 3 * time.Second
		// Given up after a third of the lease (1 s), answered at 1.2 s: in time, and again
		// for the renewal sent then (2.4 s), but not for one sent once the first is over.
		latency = 1200 * time.Millisecond
	)
	s := newSlowRenewals(t, ctx, latency)
	c := New(s.client(t), WithLease(lease))
	defer c.Close()
	other := New(s.plain)
	defer other.Close()

	key := t.Name()
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	s.on.Store(true)
	held := time.Now()
	for time.Since(held) < 2*lease {
		if err := lk.Err(); err != nil {
			t.Fatalf("lock lost after %v although every renewal reached Redis %v after it was "+
				"sent, within the lease: %v", time.Since(held).Round(time.Millisecond), latency, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.on.Store(false)
	if n := len(s.held()); n < 2 {
		t.Fatalf("%d renewals held back, want several: the scenario was not reached", n)
	}
	if _, err := other.TryAcquire(ctx, key); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another client's TryAcquire: %v, want ErrNotObtained", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// heldAnswers gives up every renewal at its context's end while the call goes on, and holds
// its answers back (lateRenewError) until answer is closed. With apply set, the call reaches
// Redis only once apply is closed; gaveUp, if set, is closed when the first call is given up.
type heldAnswers struct {
	backend
	answer chan struct{}
	apply  chan struct{}
	gaveUp chan struct{}
	once   sync.Once
}

func (b *heldAnswers) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	type result struct {
		ok  []bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		if b.apply != nil {
			<-b.apply
		}
		ok, err := b.backend.renew(context.WithoutCancel(ctx), rs)
		done <- result{ok, err}
	}()
	<-ctx.Done()
	if b.gaveUp != nil {
		b.once.Do(func() { close(b.gaveUp) })
	}
	return nil, lateAnswer(unavailable("renew", ctx.Err()), len(rs), func() ([]bool, []bool) {
		r := <-done
		<-b.answer
		failed := make([]bool, len(rs))
		for i := range failed {
			failed[i] = renewFailed(r.err, i)
		}
		return r.ok, failed
	})
}

// lateAnswer is the error of a renewal of n locks in one call given up on its way, whose
// wait gives its answers.
func lateAnswer(err error, n int, wait func() (ok, failed []bool)) *lateRenewError {
	return &lateRenewError{err: err, parts: []lateRenewal{{idx: seq(n), wait: wait}}}
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// A renewal that reached Redis in time but was answered after the lease ended on the
// holder's clock has Redis hold the lock for a whole lease that nobody uses: the holder was
// told it lost the lock. It is freed in Redis instead, and a waiter gets it at once, not
// when that lease ends.
func TestLateRenewalAnswerPastDeadlineFreesLock(t *testing.T) {
	const lease = 4 * time.Second
	held := &heldAnswers{answer: make(chan struct{}), apply: make(chan struct{}), gaveUp: make(chan struct{})}
	c, srv, ctx := testClient(t, lease, func(b backend) backend { held.backend = b; return held })
	other := New(srv.Client(t))
	defer other.Close()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()

	key := t.Name()
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lk2, err := other.Acquire(wctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- lk2
	}()
	// The renewal, given up after a third of the lease, reaches Redis late in the lease and
	// renews it there for a whole lease from then; its answer comes once the lease has ended.
	<-held.gaveUp
	lk.l.mu.Lock()
	deadline := lk.l.deadline
	lk.l.mu.Unlock()
	time.Sleep(time.Until(deadline.Add(-lease / 8)))
	close(held.apply)
	<-lk.Done()
	answered := time.Now()
	close(held.answer)

	var lk2 *Lock
	select {
	case lk2 = <-got:
	case <-time.After(lease / 2):
		wcancel()
		<-got
		t.Fatalf("a waiter did not get the lock within %v of the late answer that found it "+
			"renewed past the holder's deadline: Redis kept it for nobody", lease/2)
	}
	if lk2 == nil {
		t.FailNow()
	}
	t.Logf("waiter got the lock %v after the late answer", time.Since(answered).Round(time.Millisecond))
	if err := lk.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("holder: Err = %v, want ErrLockLost", err)
	}
	if err := lk2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An answer that comes after the lease ended on the holder's clock renews nothing, though
// Redis renewed the lock: the holder was told the lock is lost, and it stays lost.
func TestLateRenewalAnswerPastDeadlineRenewsNothing(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lease = 600 * time.Millisecond
	c := New(srv.Client(t), WithLease(lease))
	defer c.Close()
	held := &heldAnswers{backend: c.be, answer: make(chan struct{})}
	c.be = held

	lk, err := c.Acquire(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Done():
	case <-time.After(5 * lease):
		t.Fatal("lock not lost although no renewal was answered within the lease")
	}
	close(held.answer) // the renewal that Redis applied is answered only now
	_ = c.Close()      // waits for the late answer to be applied
	if err := lk.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("after a renewal answered past the deadline: Err = %v, want ErrLockLost", err)
	}
	lk.l.mu.Lock()
	deadline := lk.l.deadline
	lk.l.mu.Unlock()
	if time.Until(deadline) > 0 {
		t.Fatalf("the renewal answered past the deadline moved the lease's deadline %v ahead",
			time.Until(deadline).Round(time.Millisecond))
	}
}

// A renewal answered as the lease's expiry fires (its end about to run) renewed nothing:
// extended reported the lease renewed, and the lease ended right after all the same, with
// the renewal counted and the lock held in Redis for a whole lease by nobody.
func TestRenewalAnsweredAsExpiryFiresRenewsNothing(t *testing.T) {
	c, _, ctx := testClient(t, DefaultLease, nil)
	lk, err := c.Acquire(ctx, t.Name(), WithTTL(time.Minute)) // not renewed: the test drives the lease
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lk.Release(ctx) }()
	l := lk.l
	// The expiry fires now, and its end waits until released: the state an answer meets in
	// the instant between the two.
	fired, release := make(chan struct{}), make(chan struct{})
	l.mu.Lock()
	l.expiry.Stop()
	l.expiry = time.AfterFunc(0, func() {
		close(fired)
		<-release
		l.end(lost(EndExpired, "lease expired before it was renewed"))
	})
	l.mu.Unlock()
	<-fired
	renewed := l.extended(time.Now(), time.Minute)
	close(release)
	<-lk.Done()
	if renewed {
		t.Fatalf("extended reported a renewal of a lease whose expiry had fired; it ended right after: %v", lk.Err())
	}
}
