package dlock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A waiter whose pub/sub connection cannot be made while its commands go through (here new
// connections are refused, as by a server at its client limit) still gets the lock when it
// is freed: it looks every retry interval instead of failing the Acquire.
func TestWaitWithoutSubscriptionPolls(t *testing.T) {
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := New(srv.Client(t))
	defer func() { _ = holder.Close() }()
	held, err := holder.Acquire(ctx, "poll")
	if err != nil {
		t.Fatal(err)
	}

	n := &testNet{}
	rdb := srv.Client(t, func(o *redis.Options) { o.Dialer = n.dial })
	if err := rdb.Ping(ctx).Err(); err != nil { // the command connection exists
		t.Fatal(err)
	}
	n.refuseDials()
	c := New(rdb, WithRetryInterval(100*time.Millisecond))
	defer func() { _ = c.Close() }()
	spy := &pollSpy{backend: c.be}
	c.be = spy
	got := make(chan error, 1)
	go func() {
		lk, err := c.Acquire(ctx, "poll")
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	// The waiter is in line, its listen has failed, and it has looked since: it polls.
	if !waitFor(10*time.Second, func() bool { return spy.polls.Load() >= 1 }) {
		t.Fatalf("the waiter never looked after a failed listen (a listen failed: %v)", spy.listenFailed())
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire without a subscription: %v, want the lock once it was freed", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never got the freed lock")
	}
}

// pollSpy counts the failed listens (an error, or a listener lost), and the looks answered
// after one.
type pollSpy struct {
	backend
	mu     sync.Mutex
	failed int
	lost   []listener // the listeners returned, lost once Gone is closed
	polls  atomic.Int64
}

func (s *pollSpy) listen(ctx context.Context, key, owner string) (listener, error) {
	l, err := s.backend.listen(ctx, key, owner)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed++
	} else {
		s.lost = append(s.lost, l)
	}
	return l, err
}

// listenFailed reports whether a listen has failed.
func (s *pollSpy) listenFailed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed > 0 {
		return true
	}
	for _, l := range s.lost {
		if isClosed(l.Gone()) {
			return true
		}
	}
	return false
}

func (s *pollSpy) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	failed := s.listenFailed() // before the look: it came after the failure
	res, err := s.backend.acquire(ctx, r)
	if err == nil && failed {
		s.polls.Add(1)
	}
	return res, err
}
