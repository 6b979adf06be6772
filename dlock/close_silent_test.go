package dlock_test

import (
	"context"
	"errors"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// closeBound is what Close's doc promises for a Redis client without timeouts of its own: it
// returns within 10 s however long Redis stays silent.
const closeBound = 10 * time.Second

// silentRig is what a case of TestCloseBoundedOnSilentRedisWithoutReadTimeout works with.
type silentRig struct {
	ctx   context.Context
	c     *dlock.Client // on a go-redis client without read timeout; the one closed
	other *dlock.Client // on a go-redis client with the default timeouts
	rdb   *redis.Client
	key   string
	dials *dialGate    // c's dials
	looks *lookCounter // c's commands sent with a context marked by markLooks
}

// Close returns within its bound when the Redis client has no read timeout (ReadTimeout -1,
// without ContextTimeoutEnabled) and Redis has stopped answering (here: redis-server
// stopped with SIGSTOP), whatever is under way at Close. Before, it waited for waits to
// leave the line, for the watchdog's background work, for calls abandoned by their context
// and for the pub/sub connection being dialled, each waiting for a reply that never came.
// Once Redis answers again, what Close left behind ends: the waiter is out of line, and an
// acquisition in flight answers ErrClosed and leaves the key free.
func TestCloseBoundedOnSilentRedisWithoutReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		// start sets up, while Redis answers, what is under way when Redis falls silent. It
		// returns what to start once Redis is silent, before Close (or nil), and what to
		// check once Close returned and Redis answers again (or nil).
		start func(t *testing.T, r silentRig) (silent, check func())
	}{
		{"waiter in line", startWaiter},
		{"subscription being dialled", startSubscriptionDial},
		{"watched lock", startWatchedLock},
		{"acquisition in flight", startAcquisitionInFlight},
		{"call abandoned by its context", startAbandonedCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dials := &dialGate{held: make(chan struct{}), open: make(chan struct{}), wrote: make(chan struct{})}
			r, pid := newSilentRig(t, false, dials, dlock.WithLease(time.Second))
			silent, check := tc.start(t, r)

			resume := stopRedis(t, pid)
			defer resume()
			if silent != nil {
				silent()
			}

			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- r.c.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Errorf("Close: %v", err)
				}
				t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
			case <-time.After(5 * closeBound): // generous: the machine may be busy
				t.Errorf("Close still running %v after it began, Redis silent: unbounded\n%s",
					5*closeBound, dlockStacks())
				resume()
				select {
				case <-closed:
				case <-time.After(time.Minute):
					t.Fatal("Close still running a minute after Redis answered again")
				}
			}
			resume()
			if check != nil {
				check()
			}
		})
	}
}

// newSilentRig starts a Redis server and makes the rig of a case on it: c on a go-redis
// client without read timeout (ReadTimeout -1: go-redis waits for a reply for as long as it
// takes), with ContextTimeoutEnabled as ctxTimeouts and its dials through dials (nil:
// plain). It returns the server's process id.
func newSilentRig(t *testing.T, ctxTimeouts bool, dials *dialGate, opts ...dlock.Option) (silentRig, int) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	crdb := srv.Client(t, func(o *redis.Options) {
		o.ReadTimeout, o.ContextTimeoutEnabled = -1, ctxTimeouts
		if dials != nil {
			o.Dialer = dials.dial
		}
	})
	looks := newLookCounter()
	crdb.AddHook(looks)
	c := newClient(t, crdb, opts...)
	return silentRig{ctx: testContext(t, 2*time.Minute), c: c, other: newClient(t, rdb), rdb: rdb,
		key: uniqueKey(t), dials: dials, looks: looks}, srv.PID()
}

// stopRedis stops the redis-server process pid (SIGSTOP): it keeps its connections and
// answers nothing. The returned resume lets it go on; calls after the first do nothing.
func stopRedis(t *testing.T, pid int) (resume func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	var resumed atomic.Bool
	return func() {
		if resumed.CompareAndSwap(false, true) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// startWaiter queues an Acquire of c behind a lock of other, and waits until it is
// subscribed and has looked again after subscribing: it waits for the message (or its next
// look, a retry interval away). Once Close returned and Redis answers again, the Acquire has
// returned ErrClosed, and the key is free once the holder released it.
func startWaiter(t *testing.T, r silentRig) (func(), func()) {
	held, err := r.other.Acquire(r.ctx, r.key)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := r.c.Acquire(markLooks(r.ctx), r.key)
		res <- err
	}()
	waitQueued(t, r.rdb, r.ctx, r.key)
	waitChannel(t, r.ctx, r.rdb, r.key, true)
	r.looks.wait(t, r.ctx, "the waiter's look after subscribing", func(_, answered int) bool { return answered >= 2 })
	return nil, func() { wantWaiterGone(t, r, held, res) }
}

// startSubscriptionDial queues an Acquire of c behind a lock of other, and holds the dial of
// its pub/sub connection until Redis is silent: the connection is made (the kernel accepts
// it for the stopped server) and waits for the answer to its handshake under Close.
func startSubscriptionDial(t *testing.T, r silentRig) (func(), func()) {
	if _, _, err := r.c.Completed(r.ctx, r.key); err != nil { // the command connection
		t.Fatal(err)
	}
	held, err := r.other.Acquire(r.ctx, r.key)
	if err != nil {
		t.Fatal(err)
	}
	r.dials.armed.Store(true)
	res := make(chan error, 1)
	go func() {
		_, err := r.c.Acquire(r.ctx, r.key)
		res <- err
	}()
	select {
	case <-r.dials.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never dialled its pub/sub connection")
	}
	return func() {
			close(r.dials.open)
			select {
			case <-r.dials.wrote: // connected, its handshake on its way
			case <-time.After(30 * time.Second):
				t.Fatal("the held pub/sub dial never connected and wrote its handshake")
			}
		}, func() {
			wantWaiterGone(t, r, held, res)
		}
}

// wantWaiterGone checks that the wait of c (its result on res) ended with ErrClosed and,
// once held is released, nothing of c stands in the way of other.
func wantWaiterGone(t *testing.T, r silentRig, held *dlock.Lock, res <-chan error) {
	t.Helper()
	wantClosed(t, res, "waiter")
	if err := held.Release(r.ctx); err != nil {
		t.Fatal(err)
	}
	wantFree(t, r, "after the holder released")
}

// wantClosed checks that the acquisition of c whose result comes on res returns ErrClosed,
// now that Redis answers again.
func wantClosed(t *testing.T, res <-chan error, what string) {
	t.Helper()
	select {
	case err := <-res:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Errorf("%s: %v, want ErrClosed", what, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s still running a minute after Redis answered again", what)
	}
}

// wantFree checks that other gets the key: nothing of c is left on it.
func wantFree(t *testing.T, r silentRig, when string) {
	t.Helper()
	lk, err := r.other.Acquire(r.ctx, r.key, dlock.WithMaxWait(30*time.Second))
	if err != nil {
		t.Fatalf("key not free %s: %v", when, err)
	}
	_ = lk.Release(r.ctx)
}

// startWatchedLock takes a lock the watchdog renews (lease 1 s); Redis falls silent long
// enough for a renewal to be given up while its call is still unanswered: until the lease
// ends on the holder's clock, which comes after the renewal due a third into it (sent by
// then) was given up, a third of the lease later. Once Close returned, the lock's Done is
// closed with ErrLockLost.
func startWatchedLock(t *testing.T, r silentRig) (func(), func()) {
	lk, err := r.c.Acquire(r.ctx, r.key)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
			select {
			case <-lk.Done():
			case <-time.After(time.Minute):
				t.Fatal("the lease did not end with Redis silent")
			}
		}, func() {
			select {
			case <-lk.Done():
			case <-time.After(time.Minute):
				t.Fatal("lock's Done not closed after Close")
			}
			if !errors.Is(lk.Err(), dlock.ErrLockLost) {
				t.Errorf("lock after Close: %v, want ErrLockLost", lk.Err())
			}
		}
}

// startAcquisitionInFlight starts an Acquire, with a context that has no end, once Redis is
// silent: its look waits for a reply. Once Redis answers again, it returns ErrClosed and
// leaves the key free.
func startAcquisitionInFlight(t *testing.T, r silentRig) (func(), func()) {
	if _, _, err := r.c.Completed(r.ctx, r.key); err != nil { // a connection in the pool
		t.Fatal(err)
	}
	res := make(chan error, 1)
	return func() {
			sent, _ := r.looks.counts()
			go func() {
				_, err := r.c.Acquire(markLooks(context.Background()), r.key)
				res <- err
			}()
			r.looks.wait(t, r.ctx, "the look sent to the silent Redis", func(s, _ int) bool { return s > sent })
		}, func() {
			wantClosed(t, res, "acquisition in flight at Close")
			wantFree(t, r, "after the acquisition in flight at Close returned")
		}
}

// startAbandonedCall makes a TryAcquire whose context ends while Redis is silent: it
// returns, and its call, unanswered, goes on in the background.
func startAbandonedCall(t *testing.T, r silentRig) (func(), func()) {
	if _, _, err := r.c.Completed(r.ctx, r.key); err != nil {
		t.Fatal(err)
	}
	return func() {
		tctx, cancel := context.WithTimeout(r.ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := r.c.TryAcquire(tctx, r.key); !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("TryAcquire on a silent Redis: %v, want ErrUnavailable", err)
		}
	}, nil
}

// dialGate holds one dial of a go-redis client, once armed, until open is closed.
type dialGate struct {
	armed atomic.Bool
	held  chan struct{} // closed when the armed dial arrived
	open  chan struct{}
	wrote chan struct{} // closed when the connection of the armed dial is first written to
}

func (g *dialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	held := g.armed.CompareAndSwap(true, false)
	if held {
		close(g.held)
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil || !held {
		return c, err
	}
	return &firstWrite{Conn: c, wrote: g.wrote}, nil
}

// firstWrite closes wrote when it is first written to.
type firstWrite struct {
	net.Conn
	once  sync.Once
	wrote chan struct{}
}

func (c *firstWrite) Write(p []byte) (int, error) {
	c.once.Do(func() { close(c.wrote) })
	return c.Conn.Write(p)
}

// dlockStacks returns the stacks of the goroutines that run dlock code, to show where a
// hang is.
func dlockStacks() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var out []string
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if strings.Contains(g, "lockguard/dlock.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
