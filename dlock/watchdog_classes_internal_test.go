package dlock

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A handed-off WithTTL lease is confirmed to what is left of its ttl, which may be short,
// while the other locks of the Client have the Client lease. Renewed in one batch with them,
// it gave the whole batch its own short timeout: under a latency longer than that, every long
// lock failed its renewal along with it (here on a go-redis client with ContextTimeoutEnabled,
// which cuts the call at the deadline). The long leases must be renewed, in one call.
func TestShortLeaseDoesNotCutLongRenewals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const (
		longTTL = 30 * time.Second        // long leases: given up after 10 s
		short   = 600 * time.Millisecond  // the confirmation's ttl: given up after 200 ms
		latency = 1000 * time.Millisecond // between the two
	)
	s := newSlowRenewals(t, ctx, latency)
	c := New(s.client(t, func(o *redis.Options) { o.ContextTimeoutEnabled = true }), WithLease(longTTL))
	defer c.Close()

	var long []*lease
	for i := range 5 {
		lk, err := c.Acquire(ctx, t.Name()+"-long-"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lk.Release(ctx) }()
		long = append(long, lk.l)
	}
	// The state a hand-off with a claim lease shorter than the ttl leaves (see acquire): the
	// lease awaits its confirmation to what is left of its ttl.
	sk, err := c.Acquire(ctx, t.Name()+"-short", WithTTL(short))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sk.Release(ctx) }()
	sk.l.mu.Lock()
	sk.l.confirm, sk.l.fixedEnd = true, time.Now().Add(short)
	sk.l.mu.Unlock()

	before := make([]time.Time, len(long))
	for i, l := range long {
		l.mu.Lock()
		before[i] = l.deadline
		l.mu.Unlock()
	}
	s.on.Store(true)
	c.wd.renew(append(long[:len(long):len(long)], sk.l)) // one batch, as collect makes of all due
	s.on.Store(false)

	for i, l := range long {
		l.mu.Lock()
		after, ended, cause := l.deadline, l.ended, l.cause
		l.mu.Unlock()
		if ended || !after.After(before[i]) {
			t.Fatalf("long lease %d not renewed by the batch it shared with a short one "+
				"(latency %v, its own timeout %v; ended %v, cause %v)", i, latency, longTTL/3, ended, cause)
		}
	}
	// Leases of one length still go in one call: one write carries every long key.
	carrying := 0
	for _, w := range s.held() {
		if bytes.Contains(w, []byte(long[0].key)) {
			carrying++
			for _, l := range long {
				if !bytes.Contains(w, []byte(l.key)) {
					t.Fatalf("the long leases' renewals were split across calls: %q", w)
				}
			}
		}
	}
	if carrying != 1 {
		t.Fatalf("%d renewal writes carried the long leases, want 1", carrying)
	}
}

// renew renews due in one batch, as the loop does, and returns once every answer that came
// in time is applied.
func (w *watchdog) renew(due []*lease) { w.renewClaimed(w.claim(due)) }
