package dlock

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// testNet is a dialer for go-redis whose dials can be held back (gate) and whose
// connections can stall chosen writes, to play a slow or unreachable node.
type testNet struct {
	mu      sync.Mutex
	gate    chan struct{} // non-nil: dials wait for it to close (or for their ctx)
	dialing int           // dials waiting at the gate
	// stall, when set, is asked for every write; it returns how long to hold the write back.
	stall func(p []byte) time.Duration
	only  string // non-empty: the gate holds dials to this address only
	// delay, when set, is how long each dial takes (honouring its context).
	delay func() time.Duration
	// refuse makes every new dial fail at once, as a server at its connection limit does.
	refuse bool
	// cut, when set, is asked for every write (after stall); when it returns true, the
	// connection breaks under the write: it is closed, and the write fails.
	cut func(p []byte) bool
}

// refuseDials makes new dials fail from now on; connections made already go on working.
func (n *testNet) refuseDials() {
	n.mu.Lock()
	n.refuse = true
	n.mu.Unlock()
}

func (n *testNet) block() {
	n.mu.Lock()
	n.gate = make(chan struct{})
	n.mu.Unlock()
}

func (n *testNet) release() {
	n.mu.Lock()
	if n.gate != nil {
		close(n.gate)
		n.gate = nil
	}
	n.mu.Unlock()
}

func (n *testNet) waiting() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dialing
}

func (n *testNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	if n.refuse {
		n.mu.Unlock()
		return nil, errors.New("testnet: connection refused")
	}
	gate := n.gate
	if n.only != "" && addr != n.only {
		gate = nil
	}
	if gate != nil {
		n.dialing++
	}
	n.mu.Unlock()
	if gate != nil {
		defer func() {
			n.mu.Lock()
			n.dialing--
			n.mu.Unlock()
		}()
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if n.delay != nil {
		select {
		case <-time.After(n.delay()):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &testConn{Conn: c, n: n}, nil
}

type testConn struct {
	net.Conn
	n *testNet
}

func (c *testConn) Write(p []byte) (int, error) {
	c.n.mu.Lock()
	stall, cut := c.n.stall, c.n.cut
	c.n.mu.Unlock()
	if stall != nil {
		if d := stall(p); d > 0 {
			time.Sleep(d)
		}
	}
	if cut != nil && cut(p) {
		_ = c.Conn.Close()
		return 0, errors.New("testnet: connection cut")
	}
	return c.Conn.Write(p)
}

// isSubscribeOf reports whether p is a (non-sharded) SUBSCRIBE of channel.
func isSubscribeOf(p []byte, channel string) bool {
	return bytes.Contains(bytes.ToLower(p), []byte("\r\nsubscribe\r\n")) && bytes.Contains(p, []byte("\r\n"+channel+"\r\n"))
}

func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}
