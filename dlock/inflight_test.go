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
)

// delayConn holds back one armed write of an acquire script call (EVALSHA with 4 keys and 7
// arguments: "*14") as a slow network would: the bytes are on their way, the write returned.
type delayConn struct {
	net.Conn
	armed *atomic.Bool
	wg    *sync.WaitGroup
	delay time.Duration
}

func (c *delayConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("*14\r\n")) && c.armed.CompareAndSwap(true, false) {
		buf := bytes.Clone(p)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			time.Sleep(c.delay)
			_, _ = c.Conn.Write(buf)
		}()
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// An acquisition given up when its context ended while the acquire script was still on its
// way must not leave a lock that nobody will release: its clean-up (leave the line, pass on a
// lock the script may have granted) waits for the abandoned call to be over, so the late
// script cannot take the lock after the clean-up ran. Here the network holds the script back
// for 300 ms, well past the caller's 100 ms deadline.
func TestAbandonedAcquireLeavesNoLock(t *testing.T) {
	srv, _, _ := setup(t)
	var armed atomic.Bool
	var wg sync.WaitGroup
	rdb := redis.NewClient(&redis.Options{
		Addr: srv.Addr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &delayConn{Conn: conn, armed: &armed, wg: &wg, delay: 300 * time.Millisecond}, nil
		},
	})
	t.Cleanup(func() { wg.Wait(); _ = rdb.Close() })
	c := newClient(t, rdb)
	ctx := testContext(t, 20*time.Second)
	key := uniqueKey(t)

	// Load the scripts (a first EVALSHA would answer NOSCRIPT).
	warm, err := c.TryAcquire(ctx, key+"-warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	armed.Store(true)
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.TryAcquire(tctx, key)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire = %v, want a deadline error", err)
	}
	time.Sleep(time.Second) // the clean-up and the late acquire are done by now

	other := newClient(t, srv.Client(t))
	lk, err := other.TryAcquire(ctx, key)
	if err == nil {
		_ = lk.Release(ctx)
		return
	}
	lockKey := "lockguard:{" + key + "}:lock"
	owner, _ := srv.Client(t).HGet(ctx, lockKey, "o").Result()
	pttl, _ := srv.Client(t).PTTL(ctx, lockKey).Result()
	t.Fatalf("after a TryAcquire that failed with its deadline, the key is held by owner %q "+
		"(pttl %v) that nobody will release: another client gets %v", owner, pttl, err)
}
