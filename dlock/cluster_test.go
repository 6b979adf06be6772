package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	c := newClient(t, rdb)
	ctx := testContext(t, 60*time.Second)

	t.Run("many keys", func(t *testing.T) {
		for i := range 1000 {
			key := fmt.Sprintf("%s-%d", uniqueKey(t), i)
			if i%7 == 0 {
				key += "{brace}" // user braces must not move the lock's keys apart
			}
			lk, err := c.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			inner, err := c.Acquire(dlock.WithLock(ctx, lk), key)
			if err != nil || inner.HoldCount() != 2 {
				t.Fatalf("re-entry %d: %v", i, err)
			}
			if err := inner.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("release %d: %v", i, err)
			}
		}
		// Keys landed on every master.
		var mu sync.Mutex
		perNode := map[string]int{}
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redisClusterNode) error {
			n, err := m.DBSize(ctx).Result()
			mu.Lock()
			perNode[m.String()] = int(n)
			mu.Unlock()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for node, n := range perNode {
			if n == 0 {
				t.Errorf("no fence data on %s: keys did not spread", node)
			}
		}
	})

	t.Run("hand-off over sharded pub/sub", func(t *testing.T) {
		key := uniqueKey(t)
		lk, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		waiter := newClient(t, rdb, dlock.WithRetryInterval(5*time.Second))
		got := make(chan error, 1)
		go func() {
			l2, err := waiter.Acquire(ctx, key)
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// In line and subscribed on the slot's node: the release hands it the lock by message.
		waitQueued(t, rdb, ctx, key)
		waitShardChannel(t, ctx, rdb, key, true)
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("waiter on a cluster not woken by the release")
		}
	})

	t.Run("watchdog batches across slots", func(t *testing.T) {
		// A lease long enough that a renewal given up after a third of it is a fault, not a
		// loaded machine running the race detector.
		cw := newClient(t, rdb, dlock.WithLease(1500*time.Millisecond))
		var locks []*dlock.Lock
		for i := range 200 {
			lk, err := cw.TryAcquire(ctx, fmt.Sprintf("%s-%d", uniqueKey(t), i))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, lk)
		}
		time.Sleep(3500 * time.Millisecond) // more than two leases
		for _, lk := range locks {
			if err := lk.Release(ctx); err != nil {
				t.Fatalf("lock lost on a cluster despite renewal: %v", err)
			}
		}
	})

	if _, err := c.TryAcquire(ctx, ""); !errors.Is(err, dlock.ErrInvalidKey) {
		t.Fatal(err)
	}
}
