package dlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// On a Cluster each node's renewals are one call, and under latency past a third of the lease
// every node's call is given up while on its way. The answers of the nodes that answer in
// time must renew their locks as they come: they used to wait for the slowest node's call
// (a silent node: up to releaseBound), and the locks of every node were lost with its own.
func TestLateNodeAnswersDoNotWaitForSilentNode(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const (
		lease = 3 * time.Second
		// Given up after a third of the lease (1 s); the healthy nodes answer at 1.2 s, well
		// within the lease, the silent one only past it (its write fails at its timeout).
		latency = 1200 * time.Millisecond
		silence = lease + lease/2
	)
	// One key per master (the first master's goes silent), and the renew script loaded on
	// each, so every renewal is an EVALSHA the stall can tell.
	keys := make([]string, len(cl.Masters))
	for i, found := 0, 0; found < len(keys); i++ {
		k := fmt.Sprintf("%s-%d", t.Name(), i)
		m, err := cl.MasterOf(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if j := slices.Index(cl.Masters, m); j >= 0 && keys[j] == "" {
			keys[j] = k
			found++
		}
	}
	silentKey := keys[0]
	for _, m := range cl.Masters {
		if err := m.Client(t).ScriptLoad(ctx, luaRenew).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var on atomic.Bool
	var heldSilent, heldHealthy atomic.Int64
	silentAddr := cl.Masters[0].Addr()
	stall := func(addr string) func(p []byte) time.Duration {
		return func(p []byte) time.Duration {
			if !on.Load() || !bytes.Contains(p, []byte(scriptRenew.sha)) {
				return 0
			}
			if addr == silentAddr {
				heldSilent.Add(1)
				return silence
			}
			heldHealthy.Add(1)
			return latency
		}
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&testNet{stall: stall(addr)}).dial(ctx, network, addr)
	}
	c := New(cl.Client(t, func(o *redis.ClusterOptions) { o.Dialer = dial }), WithLease(lease))
	defer c.Close()
	other := New(cl.Client(t))
	defer other.Close()

	var healthy []*Lock
	for _, k := range keys {
		lk, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lk.Release(ctx) }()
		if k != silentKey {
			healthy = append(healthy, lk)
		}
	}
	on.Store(true)
	held := time.Now()
	for time.Since(held) < 2*lease {
		for _, lk := range healthy {
			if err := lk.Err(); err != nil {
				t.Fatalf("lock on a node that answers within %v lost after %v, while another "+
					"node was silent: %v", latency, time.Since(held).Round(time.Millisecond), err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	on.Store(false)
	if heldSilent.Load() == 0 || heldHealthy.Load() < int64(2*len(healthy)) {
		t.Fatalf("renewals held back: %d to the silent node, %d to the others: the scenario "+
			"was not reached", heldSilent.Load(), heldHealthy.Load())
	}
	for _, lk := range healthy {
		if _, err := other.TryAcquire(ctx, lk.Key()); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another client's TryAcquire of a lock held on a healthy node: %v, want ErrNotObtained", err)
		}
	}
}
