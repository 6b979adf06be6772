package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// cutNet plays a network that breaks once armed: the next acquire script call (EVALSHA with
// 4 keys and 7 arguments: "*14") reaches Redis and runs (ran says when it has), then the
// connection breaks and the network is down for outage, dials and writes failing.
type cutNet struct {
	armed  atomic.Bool
	down   atomic.Bool
	wg     sync.WaitGroup
	outage time.Duration
	ran    func() bool // whether Redis has run the armed call, seen from another connection
}

func (n *cutNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if n.down.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("network unreachable")}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, n: n}, nil
}

// cutConn is one connection of a cutNet.
type cutConn struct {
	net.Conn
	n *cutNet
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.n.down.Load() {
		_ = c.Conn.Close()
		return 0, errors.New("network unreachable")
	}
	if !bytes.HasPrefix(p, []byte("*14\r\n")) || !c.n.armed.CompareAndSwap(true, false) {
		return c.Conn.Write(p)
	}
	_, err := c.Conn.Write(p)
	// The connection breaks once Redis has run the script: its reply is what is lost. (Not
	// run within the bound, the test finds the lock not taken and says so.)
	for end := time.Now().Add(10 * time.Second); c.n.ran != nil && !c.n.ran() && time.Now().Before(end); {
		time.Sleep(2 * time.Millisecond)
	}
	c.n.down.Store(true)
	_ = c.Conn.Close()
	c.n.wg.Add(1)
	go func() {
		defer c.n.wg.Done()
		time.Sleep(c.n.outage) // a deliberate window: the network stays down for the outage
		c.n.down.Store(false)
	}()
	return len(p), err
}

// heldBy returns the owner id the lock hash of key names ("" when none) and its TTL.
func heldBy(t *testing.T, rdb *redis.Client, key string) (string, time.Duration) {
	t.Helper()
	lockKey := dlock.DefaultPrefix + ":{" + key + "}:lock"
	owner, _ := rdb.HGet(t.Context(), lockKey, "o").Result()
	pttl, _ := rdb.PTTL(t.Context(), lockKey).Result()
	return owner, pttl
}

// obtainedWithin reports whether c takes key within d, trying every 50 ms, and releases it.
func obtainedWithin(t *testing.T, c *dlock.Client, key string, d time.Duration) (bool, error) {
	t.Helper()
	var err error
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		var lk *dlock.Lock
		if lk, err = c.TryAcquire(t.Context(), key); err == nil {
			return true, lk.Release(t.Context())
		}
	}
	return false, err
}

// An acquire script that ran, but whose reply was lost to a network that then stayed down
// for a few seconds (so the clean-up's first leave failed too), does not leave the lock held
// in Redis until its lease ends: the leave is tried again until Redis answers.
func TestLostAcquireReplyFreedAfterOutage(t *testing.T) {
	srv, check, _ := setup(t)
	n := &cutNet{outage: 2 * time.Second}
	// No retries by go-redis: the leave fails at once while the network is down, as one
	// with retries does when the outage outlasts them.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: n.dial, MaxRetries: -1})
	t.Cleanup(func() { n.wg.Wait(); _ = rdb.Close() })
	const lease = time.Minute // what the lock would be held for if nobody freed it
	c := newClient(t, rdb, dlock.WithLease(lease))
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	warm, err := c.TryAcquire(ctx, key+"-warm") // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	n.ran = func() bool { owner, _ := heldBy(t, check, key); return owner != "" }
	n.armed.Store(true)
	if _, err = c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire with its reply lost = %v, want ErrUnavailable", err)
	}
	if owner, _ := heldBy(t, check, key); owner == "" {
		t.Fatal("the acquire script did not run: the test tests nothing")
	}
	n.wg.Wait() // the network is back
	other := newClient(t, srv.Client(t))
	if ok, err := obtainedWithin(t, other, key, 15*time.Second); !ok {
		owner, pttl := heldBy(t, check, key)
		t.Fatalf("15 s after the network came back the lock is still held by the failed TryAcquire's owner %q "+
			"(%v of its %v lease left): %v", owner, pttl, lease, err)
	}
}

// With ContextTimeoutEnabled, go-redis ends a call at its context's deadline, but the script
// it sent may still reach Redis and run after the clean-up's leave: it finds its owner gone
// (leave.lua records it) and takes nothing. Without that, a lock nobody holds would block the
// key for a whole lease.
func TestLateAcquireAfterDeadlineTakesNothing(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "TryAcquire", true: "Acquire"}[wait], func(t *testing.T) {
			srv, check, _ := setup(t)
			c, armed, wg := delayedClient(t, srv, 300*time.Millisecond, true)
			ctx := testContext(t, 30*time.Second)
			key := uniqueKey(t)

			armed.Store(true)
			tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			acquire := c.TryAcquire
			if wait {
				acquire = func(ctx context.Context, key string, opts ...dlock.AcquireOption) (*dlock.Lock, error) {
					return c.Acquire(ctx, key, append(opts, dlock.WithMaxWait(100*time.Millisecond))...)
				}
			}
			if lk, err := acquire(tctx, key); err == nil {
				_ = lk.Release(ctx)
				t.Fatal("the acquisition succeeded: its script was held back past the deadline")
			}
			wg.Wait() // the late script has reached Redis
			if owner, _ := heldBy(t, check, key); owner != "" {
				t.Fatalf("the script that came in after the acquisition gave up took the lock for %q", owner)
			}
			if ok, err := obtainedWithin(t, newClient(t, srv.Client(t)), key, time.Second); !ok {
				t.Fatalf("another client cannot take the key: %v", err)
			}
		})
	}
}

// A TryAcquire in flight as Close runs, whose script reaches Redis after the call gave up,
// takes nothing either: the clean-up of a look that failed is sent although Close no longer
// takes background work, so the key is not left locked for the whole lease with nobody to
// renew or release it.
//
// The case needs Close over before the look fails, at the TryAcquire's 100 ms deadline: a
// machine that stalls past it makes the clean-up start before Close stopped taking
// background work. Each attempt says whether its Close returned before that deadline; one
// that did not is run again, and the test fails when none did.
func TestLateAcquireAfterCloseTakesNothing(t *testing.T) {
	srv, check, _ := setup(t)
	const attempts = 5
	for attempt := 1; attempt <= attempts; attempt++ {
		if lateAcquireAfterClose(t, srv, check) {
			return
		}
		t.Logf("attempt %d: Close returned after the TryAcquire's deadline: the case was not reached", attempt)
	}
	t.Fatalf("in %d attempts, Close never returned before the TryAcquire's 100 ms deadline: a look "+
		"failing after Close (its clean-up not taken as background work) was never tested", attempts)
}

// lateAcquireAfterClose runs one attempt of TestLateAcquireAfterCloseTakesNothing on a new
// Client of srv, failing the test when the key stays locked. It reports whether the case was
// reached: Close had returned (the watchdog closed to background work) before the
// TryAcquire's deadline, so before its look failed and its clean-up began.
func lateAcquireAfterClose(t *testing.T, srv *redistest.Server, check *redis.Client) bool {
	t.Helper()
	c, armed, wg := delayedClient(t, srv, 300*time.Millisecond, true)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)

	armed.Store(true)
	got := make(chan error, 1)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	go func() {
		lk, err := c.TryAcquire(tctx, key)
		if err == nil {
			_ = lk.Release(ctx)
		}
		got <- err
	}()
	// Close once the script is held back on its way: the connection took the armed write. A
	// fine poll: the acquisition gives up 100 ms after it began, and Close must come first.
	for armed.Load() {
		select {
		case err := <-got:
			t.Fatalf("the TryAcquire returned (%v) before its script was held back", err)
		case <-ctx.Done():
			t.Fatal("the TryAcquire never sent its script")
		case <-time.After(time.Millisecond):
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The look fails at the deadline (go-redis's ContextTimeoutEnabled: the connection's read
	// deadline), not before: the connection holds the script back and nothing answers it. Not
	// yet past it now, Close was over before the look failed.
	deadline, _ := tctx.Deadline()
	closedFirst := time.Now().Before(deadline)
	if err := <-got; err == nil {
		t.Fatal("the acquisition succeeded: its script was held back past the deadline")
	}
	wg.Wait() // the late script has reached Redis
	if ok, err := obtainedWithin(t, newClient(t, srv.Client(t)), key, time.Second); !ok {
		owner, _ := heldBy(t, check, key)
		t.Fatalf("another client cannot take the key (held by %q; Close before the deadline: %v): %v", owner, closedFirst, err)
	}
	return closedFirst
}

// A leave records the gone owner in the lock hash, which must outlive the late look. A
// released lock's hash stays only until that lock's lease would have ended (200 ms here): the
// leave keeps it for the leaving acquisition's lease, so the look that comes in 400 ms after
// it was sent still finds the record and takes nothing.
func TestLateAcquireAfterReleasedHashWouldExpire(t *testing.T) {
	srv, check, _ := setup(t)
	c, armed, wg := delayedClient(t, srv, 400*time.Millisecond, true)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	other := newClient(t, srv.Client(t))
	prev, err := other.TryAcquire(ctx, key, dlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if lk, err := c.TryAcquire(tctx, key); err == nil {
		_ = lk.Release(ctx)
		t.Fatal("the acquisition succeeded: its script was held back past the deadline")
	}
	lockKey := dlock.DefaultPrefix + ":{" + key + "}:lock"
	if gone, _ := check.HGet(ctx, lockKey, "g").Result(); gone == "" {
		t.Fatal("the leave did not record the owner as gone")
	}
	wg.Wait() // the late script has reached Redis
	if owner, pttl := heldBy(t, check, key); owner != "" {
		_, terr := other.TryAcquire(ctx, key)
		t.Fatalf("the look that came in after its acquisition gave up took the lock for %q (%v of "+
			"lease left, nobody to renew or release it); another client gets: %v", owner, pttl.Round(time.Second), terr)
	}
}
