package dlock

import (
	"context"
	"sync"
	"testing"
	"time"
)

// namesSpy records the names handle of every request the Client makes.
type namesSpy struct {
	backend
	mu   sync.Mutex
	seen map[string][]any // by operation: what the request carried, then what acquire answered
}

func (s *namesSpy) note(op string, names any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[op] = append(s.seen[op], names)
}

func (s *namesSpy) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	s.note("acquire", r.names)
	res, err := s.backend.acquire(ctx, r)
	s.note("acquired", res.names)
	return res, err
}

func (s *namesSpy) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	s.note("release", r.names)
	return s.backend.release(ctx, r)
}

func (s *namesSpy) leave(ctx context.Context, r acquireRequest) (handOff, error) {
	s.note("leave", r.names)
	return s.backend.leave(ctx, r)
}

func (s *namesSpy) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	for _, r := range rs {
		s.note("renew", r.names)
	}
	return s.backend.renew(ctx, rs)
}

// A lock's key names are made once per acquisition: the first look makes them, and every
// later request about the lock (the next looks, leaving the line, renewals, the release)
// carries the same ones back.
func TestKeyNamesMadeOncePerAcquisition(t *testing.T) {
	spy := &namesSpy{seen: map[string][]any{}}
	c, _, ctx := testClient(t, 600*time.Millisecond, // the watchdog renews every 200 ms
		func(b backend) backend { spy.backend = b; return spy })
	key := t.Name()

	holder, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter whose wait ends leaves the line with the names of its looks.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := c.Acquire(wctx, key); err == nil {
		t.Fatal("a second owner obtained a held lock")
	}
	cancel()
	if err := holder.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	renewals := func() int {
		spy.mu.Lock()
		defer spy.mu.Unlock()
		return len(spy.seen["renew"])
	}
	// At least one watchdog renewal after the Refresh (whose own renewal is counted already).
	if refreshed := renewals(); !waitFor(10*time.Second, func() bool { return renewals() > refreshed }) {
		t.Fatal("no watchdog renewal after the Refresh")
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}

	spy.mu.Lock()
	defer spy.mu.Unlock()
	asked, answered := spy.seen["acquire"], spy.seen["acquired"]
	if len(asked) < 3 || asked[0] != nil || asked[1] != nil {
		t.Fatalf("looks carried %v, want nil for each owner's first look (holder, waiter) and a waiter that looked again", asked)
	}
	holderNames, waiterNames := answered[0], answered[1]
	if _, ok := holderNames.(*lockNames); !ok || holderNames == waiterNames {
		t.Fatalf("acquire answered names %v then %v: want one made for each acquisition", holderNames, waiterNames)
	}
	for i, got := range asked[2:] {
		if got != waiterNames {
			t.Fatalf("the waiter's look %d carried %p, want its first look's %p", i+2, got, waiterNames)
		}
	}
	for _, op := range []string{"leave", "renew", "release"} {
		if len(spy.seen[op]) == 0 {
			t.Fatalf("no %s request", op)
		}
		want := holderNames
		if op == "leave" {
			want = waiterNames
		}
		for _, got := range spy.seen[op] {
			if got != want {
				t.Fatalf("%s carried %p, want %p", op, got, want)
			}
		}
	}
}
