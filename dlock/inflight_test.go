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

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// delayConn holds back one armed write of an acquire script call (EVALSHA with 4 keys and 7
// arguments: "*14") as a slow network would: the bytes are on their way, the write returned.
// Closed meanwhile (go-redis closes a connection whose call ended at its deadline), it closes
// as the kernel does: the bytes already written are still delivered first, and Redis runs
// them. The held-back write counts in wg until it was written and, on a connection closed
// meanwhile, answered: Redis has run the script by then.
type delayConn struct {
	net.Conn
	armed *atomic.Bool
	wg    *sync.WaitGroup
	delay time.Duration

	mu         sync.Mutex
	pending    bool // a held-back write is on its way
	closeAfter bool // closed while it was
}

// delayDialer dials connections whose next armed acquire script call is held back for delay;
// wg counts the writes held back.
func delayDialer(armed *atomic.Bool, wg *sync.WaitGroup, delay time.Duration) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &delayConn{Conn: conn, armed: armed, wg: wg, delay: delay}, nil
	}
}

// delayedClient returns a Client on srv, with its scripts loaded (a first EVALSHA would
// answer NOSCRIPT), whose connections hold back the next acquire script call for delay once
// armed is set; wg counts the writes held back. timeouts sets go-redis's
// ContextTimeoutEnabled: a call then ends at its context's deadline. hooks are added to the
// go-redis client.
func delayedClient(t *testing.T, srv *redistest.Server, delay time.Duration, timeouts bool, hooks ...redis.Hook) (*dlock.Client, *atomic.Bool, *sync.WaitGroup) {
	armed, wg := new(atomic.Bool), new(sync.WaitGroup)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Dialer: delayDialer(armed, wg, delay),
		ContextTimeoutEnabled: timeouts})
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	t.Cleanup(func() { wg.Wait(); _ = rdb.Close() })
	c := newClient(t, rdb)
	ctx := testContext(t, 10*time.Second)
	warm, err := c.TryAcquire(ctx, uniqueKey(t)+"-warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return c, armed, wg
}

func (c *delayConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("*14\r\n")) && c.armed.CompareAndSwap(true, false) {
		buf := bytes.Clone(p)
		c.mu.Lock()
		c.pending = true
		c.mu.Unlock()
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			// A deliberate window: the script reaches Redis delay late, past the caller's end.
			time.Sleep(c.delay)
			_ = c.Conn.SetWriteDeadline(time.Time{}) // the kernel took the bytes before any deadline
			_, _ = c.Conn.Write(buf)
			c.mu.Lock()
			c.pending = false
			closeNow := c.closeAfter
			c.mu.Unlock()
			if closeNow {
				// Redis runs the script before the close: wait for its answer, which nobody
				// else reads now (go-redis let go of the connection).
				_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = c.Conn.Read(make([]byte, 1))
				_ = c.Conn.Close()
			}
		}()
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *delayConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending {
		c.closeAfter = true
		return nil
	}
	return c.Conn.Close()
}

// An acquisition given up when its context ended while the acquire script was still on its
// way must not leave a lock that nobody will release: its clean-up (leave the line, pass on a
// lock the script may have granted) waits for the abandoned call to be over, so the late
// script cannot take the lock after the clean-up ran. Here the network holds the script back
// for 300 ms, well past the caller's 100 ms deadline.
func TestAbandonedAcquireLeavesNoLock(t *testing.T) {
	srv, _, _ := setup(t)
	looks := newLookCounter() // the TryAcquire's script call (marked by markLooks)
	c, armed, _ := delayedClient(t, srv, 300*time.Millisecond, false, looks)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)

	armed.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.TryAcquire(markLooks(tctx), key)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire = %v, want a deadline error", err)
	}
	// The call, given up by the TryAcquire, goes on: Redis runs the late script and answers.
	// Every marked call sent so far answered: the script's, and any clean-up sent before it.
	looks.wait(t, ctx, "the answer to the late script", func(sent, answered int) bool { return sent >= 1 && answered == sent })
	// Once its call is over, the clean-up frees whatever the late script took: the key is free
	// within moments, long before the 30 s lease such a lock would be held for otherwise.
	other := newClient(t, srv.Client(t))
	if ok, err := obtainedWithin(t, other, key, 10*time.Second); !ok {
		owner, pttl := heldBy(t, srv.Client(t), key)
		t.Fatalf("after a TryAcquire that failed with its deadline, the key is held by owner %q "+
			"(pttl %v) that nobody will release: another client gets %v", owner, pttl, err)
	}
}
