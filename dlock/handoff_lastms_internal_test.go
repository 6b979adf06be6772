package dlock

import (
	"testing"
	"time"
)

// A look that finds the lock handed to it already (its hand-off message lost or not read
// yet) is answered with what is left of the claim lease. In its last millisecond that is
// PTTL 0: the grant holds that millisecond and awaits confirmation, as every hand-off does,
// rather than count as a lock freshly taken for the whole lease.
func TestHandOffFoundInItsLastMillisecond(t *testing.T) {
	res, err := parseAcquire([]any{int64(1), int64(12345), int64(0)}, DefaultLease)
	if err != nil {
		t.Fatal(err)
	}
	var g grant
	done, err := (&Client{}).settled(&g, acquireRequest{ttl: DefaultLease}, res)
	if !done || err != nil || !g.handedOff || g.valid > time.Millisecond || g.token != 12345 {
		t.Fatalf("reply {1, 12345, 0}: done %v err %v handedOff %v valid %v token %d; want a hand-off "+
			"valid for at most 1ms", done, err, g.handedOff, g.valid, g.token)
	}

	// The same against Redis: a hand-off's state with a 3 ms claim lease, looked at until a
	// look lands in its last millisecond (or the lease ran out first, a fresh lock).
	c, srv, ctx := testClient(t, 30*time.Second, nil)
	rdb := srv.Client(t)
	key := t.Name()
	keys, _ := c.be.(*redisBackend).keys(key)
	for range 300 {
		owner := c.ids.next()
		if err := rdb.HSet(ctx, keys[0], "o", owner, "t", 12345, "h", "1", "w", "1").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.PExpire(ctx, keys[0], 3*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		for {
			g, err := c.obtain(ctx, ctx, acquireRequest{key: key, owner: owner, ttl: c.cfg.lease})
			if err != nil {
				t.Fatal(err)
			}
			if g.token != 12345 {
				break // the claim lease ran out first
			}
			if !g.handedOff || g.valid > 3*time.Millisecond {
				t.Fatalf("a look that found its own hand-off with at most 3ms left counts %v (handedOff %v)",
					g.valid, g.handedOff)
			}
		}
		if err := rdb.Del(ctx, keys[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
