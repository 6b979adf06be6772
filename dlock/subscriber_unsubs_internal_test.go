package dlock

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// unsubDialer dials connections that swallow SUNSUBSCRIBE commands while swallow is set (a
// network that stops delivering), and keeps the connections that carried an SSUBSCRIBE.
type unsubDialer struct {
	swallow   atomic.Bool
	swallowed atomic.Int32
	mu        sync.Mutex
	subConns  []net.Conn
}

type unsubConn struct {
	net.Conn
	d   *unsubDialer
	sub atomic.Bool
}

func (d *unsubDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &unsubConn{Conn: c, d: d}, nil
}

func (c *unsubConn) Write(p []byte) (int, error) {
	lp := bytes.ToLower(p)
	if bytes.Contains(lp, []byte("ssubscribe")) && !c.sub.Swap(true) {
		c.d.mu.Lock()
		c.d.subConns = append(c.d.subConns, c.Conn)
		c.d.mu.Unlock()
	}
	if c.d.swallow.Load() && bytes.Contains(lp, []byte("sunsubscribe")) {
		c.d.swallowed.Add(1)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// breakSubConns closes the pub/sub connections dialled so far and reports how many it closed.
func (d *unsubDialer) breakSubConns() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.subConns)
	for _, c := range d.subConns {
		_ = c.Close()
	}
	d.subConns = nil
	return n
}

func (d *unsubDialer) subConnCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.subConns)
}

// An unsubscribe of ours lost with a broken connection (sent, never answered) must not make
// the subscriber take a later unsubscribe by Redis for ours. Here x is unsubscribed while the
// network swallows the command; the connection breaks and go-redis re-dials it (bound to the
// slot's master by p, a channel of the same slot); x is subscribed again and confirmed, p is
// let go, and the slot moves to another master, which ends x's subscription. x's listener
// must be told (Gone): its messages now go to the new master, not to this connection.
func TestLostUnsubscribeDoesNotHideRedisUnsubscribe(t *testing.T) {
	cl := redistest.StartCluster(t)
	d := &unsubDialer{}
	rdb := cl.Client(t, func(o *redis.ClusterOptions) { o.Dialer = d.dial })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	be := newRedisBackend(rdb, &config{lease: time.Minute, retry: time.Second, prefix: "lockguard"})
	defer func() { _ = be.close() }()
	s := be.subs
	x, slot := be.channel("stale-x")
	var p string
	for i := 0; p == ""; i++ {
		if ch, sl := be.channel(fmt.Sprintf("stale-p%d", i)); sl == slot {
			p = ch
		}
	}
	listen := func(ch string) listener {
		t.Helper()
		l, err := s.listen(ctx, ch, slot, "o")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Ready():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: subscription not confirmed", ch)
		}
		return l
	}
	src, err := cl.MasterOf(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	srcClient := src.Client(t)
	subscribers := func(ch string) int64 {
		t.Helper()
		v, err := srcClient.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).Slice()
		if err != nil || len(v) != 2 {
			t.Fatalf("PUBSUB SHARDNUMSUB %s: %v %v", ch, v, err)
		}
		n, _ := v[1].(int64)
		return n
	}
	outstanding := func(ch string) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		if conn := s.conns[slot]; conn != nil {
			return len(conn.unsubs[ch])
		}
		return 0
	}

	lp := listen(p)
	lx := listen(x)
	d.swallow.Store(true)
	lx.Close()
	if !waitFor(5*time.Second, func() bool { return d.swallowed.Load() > 0 }) {
		t.Fatal("x not unsubscribed after its linger")
	}
	d.swallow.Store(false)
	if d.breakSubConns() != 1 {
		t.Fatal("want one pub/sub connection")
	}
	if !waitFor(10*time.Second, func() bool { return d.subConnCount() == 1 && subscribers(p) == 1 && subscribers(x) == 0 }) {
		t.Fatalf("not re-dialled: %d connections, p has %d subscribers, x %d", d.subConnCount(), subscribers(p), subscribers(x))
	}

	lx2 := listen(x)
	defer lx2.Close()
	lp.Close()
	if !waitFor(5*time.Second, func() bool { return subscribers(p) == 0 && outstanding(p) == 0 }) {
		t.Fatal("p not unsubscribed after its linger")
	}

	// The slot moves to another master (it holds no keys): the source ends x's subscription.
	var masters []*redis.Client
	var target string
	for _, n := range cl.Nodes() {
		c := n.Client(t)
		if role, _ := c.Do(ctx, "ROLE").Slice(); len(role) == 0 || role[0] != "master" {
			continue
		}
		masters = append(masters, c)
		if n != src && target == "" {
			if target, err = c.ClusterMyID(ctx).Result(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range masters {
		if err := c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target).Err(); err != nil {
			t.Fatalf("CLUSTER SETSLOT on %s: %v", c.Options().Addr, err)
		}
	}
	select {
	case <-lx2.Gone():
	case <-time.After(10 * time.Second):
		t.Fatal("x's subscription was ended by Redis, and its listener was not told: the lost unsubscribe was taken for it")
	}
}
