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
// its answers back (lateRenewError.wait) until answer is closed.
type heldAnswers struct {
	backend
	answer chan struct{}
}

func (b *heldAnswers) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	type result struct {
		ok  []bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := b.backend.renew(context.WithoutCancel(ctx), rs)
		done <- result{ok, err}
	}()
	<-ctx.Done()
	return nil, &lateRenewError{err: unavailable("renew", ctx.Err()), wait: func() ([]bool, []bool) {
		r := <-done
		<-b.answer
		failed := make([]bool, len(rs))
		for i := range failed {
			failed[i] = renewFailed(r.err, i)
		}
		return r.ok, failed
	}}
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
