package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// keyWhere returns a lock key starting with base whose slot is served by the master at addr
// (on true) or by another master (on false).
func keyWhere(t *testing.T, ctx context.Context, cl *redistest.Cluster, base, addr string, on bool) string {
	t.Helper()
	for i := range 1000 {
		key := fmt.Sprintf("%s-%d", base, i)
		m, err := cl.MasterOf(ctx, "{"+key+"}")
		if err != nil {
			t.Fatal(err)
		}
		if (m.Addr() == addr) == on {
			return key
		}
	}
	t.Fatalf("no key found for %s (on %v)", addr, on)
	return ""
}

// A waiter that subscribes through a node that does not answer (here: its connection cannot
// be dialled) must not hold up hand-offs on other nodes: neither a Release that passes its
// lock to a waiter of the same client, nor the message a release by another client publishes.
// The fallback look is an hour away, so only the hand-off can end these waits.
func TestStalledSubscribeDoesNotHoldUpOtherKeys(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addrB := cl.Nodes()[0].Addr()
	keyB := keyWhere(t, ctx, cl, "stall-b", addrB, true)
	keyA := keyWhere(t, ctx, cl, "stall-a", addrB, false)
	remoteKey := keyWhere(t, ctx, cl, "stall-remote", addrB, false)

	gate := &testNet{only: addrB}
	rdb := cl.Client(t, func(o *redis.ClusterOptions) { o.Dialer = gate.dial })
	c := New(rdb, WithRetryInterval(time.Hour))
	defer func() { _ = c.Close() }()
	other := New(cl.Client(t))
	defer func() { _ = other.Close() }()
	// Command connections to every master exist before the gate shuts.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}

	// Two waits on keyA's node: one for a lock held by this client, one for a lock held by
	// another client. Both are queued and subscribed before the gate shuts.
	local, err := c.Acquire(ctx, keyA)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := other.Acquire(ctx, remoteKey)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *Lock
		err error
	}
	waitOn := func(key string) chan result {
		ch := make(chan result, 1)
		go func() {
			lk, err := c.Acquire(ctx, key)
			ch <- result{lk, err}
		}()
		return ch
	}
	gotLocal, gotRemote := waitOn(keyA), waitOn(remoteKey)
	waitSubscribed(t, ctx, cl, keyA)
	waitSubscribed(t, ctx, cl, remoteKey)

	// A third wait needs a subscription through keyB's node, whose dial now hangs.
	held, err := other.Acquire(ctx, keyB)
	if err != nil {
		t.Fatal(err)
	}
	gate.block()
	defer gate.release()
	stalledCtx, cancelStalled := context.WithCancel(ctx)
	stalled := make(chan error, 1)
	go func() {
		lk, err := c.Acquire(stalledCtx, keyB)
		if err == nil {
			err = lk.Release(ctx)
		}
		stalled <- err
	}()
	if !waitFor(30*time.Second, func() bool { return gate.waiting() > 0 }) {
		t.Fatal("the wait on keyB never dialled its subscription")
	}

	released := make(chan error, 1)
	go func() { released <- local.Release(ctx) }()
	if err := remote.Release(ctx); err != nil {
		t.Fatal(err)
	}
	limit := time.After(4 * time.Second) // under the subscription's own 5 s send limit
	for _, w := range []struct {
		what string
		ch   chan result
	}{{"hand-off within this client", gotLocal}, {"hand-off message from another client", gotRemote}} {
		select {
		case r := <-w.ch:
			if r.err != nil {
				t.Fatalf("%s: %v", w.what, r.err)
			}
			if err := r.lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-limit:
			t.Errorf("%s: the waiter is still waiting while another node's subscription dials", w.what)
		}
	}
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-limit:
		t.Error("Release is held up by another node's subscription dial")
	}

	gate.release()
	cancelStalled()
	<-stalled
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-gotLocal:
		if r.err == nil {
			_ = r.lk.Release(ctx)
		}
	case <-released:
	default:
	}
}

// waitSubscribed waits until some client subscribes to the hand-off channel of key.
func waitSubscribed(t *testing.T, ctx context.Context, cl *redistest.Cluster, key string) {
	t.Helper()
	ch := "lockguard:{" + key + "}:ch"
	m, err := cl.MasterOf(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	node := redis.NewClient(m.Options())
	defer func() { _ = node.Close() }()
	for {
		res, err := node.Do(ctx, "PUBSUB", "SHARDNUMSUB", ch).Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 2 {
			if n, _ := res[1].(int64); n > 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nobody subscribed to %s", ch)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
