package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// One silent Cluster node costs only the locks it holds: the watchdog's renewals of locks on
// the other nodes get through while it is paused, past several leases. Before, the batch of
// every node failed with the silent one, and every lock of the process was given up.
func TestClusterSilentNodeKeepsOtherRenewals(t *testing.T) {
	cl := redistest.StartCluster(t)
	const lease = 1200 * time.Millisecond
	c := newClient(t, cl.Client(t), dlock.WithLease(lease))
	other := newClient(t, cl.Client(t))
	ctx := testContext(t, 30*time.Second)

	// One key on the node to pause, and one on each other node.
	masters, keys := keyPerMaster(t, ctx, cl)
	silent, silentKey := masters[0], keys[0]
	silentLock, err := c.TryAcquire(ctx, silentKey)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silentLock.Release(ctx) }()
	var locks []*dlock.Lock
	for _, k := range keys[1:] {
		lk, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lk.Release(ctx) }()
		locks = append(locks, lk)
	}

	pause := 2*lease + lease/2
	paused := time.Now()
	if err := silent.Pause(ctx, pause); err != nil {
		t.Fatal(err)
	}
	select {
	case <-silentLock.Done():
	case <-time.After(pause + lease):
		t.Fatal("the lock on the paused node outlived its lease with no renewal answered")
	}
	if err := silentLock.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("lock on the paused node: Err = %v, want ErrLockLost", err)
	}
	time.Sleep(time.Until(paused.Add(pause + 300*time.Millisecond))) // past the pause
	for _, lk := range locks {
		if err := lk.Err(); err != nil {
			t.Fatalf("lock on a healthy node ended while another node was paused: %v", err)
		}
		if lk2, err := other.TryAcquire(ctx, lk.Key()); !errors.Is(err, dlock.ErrNotObtained) {
			if err == nil {
				_ = lk2.Release(ctx)
			}
			t.Fatalf("lock on a healthy node: another client's TryAcquire err = %v, want ErrNotObtained", err)
		}
	}
}

// keyPerMaster returns a key of the test's for each master of cl, with the master that serves it.
func keyPerMaster(t *testing.T, ctx context.Context, cl *redistest.Cluster) ([]*redistest.Server, []string) {
	t.Helper()
	var masters []*redistest.Server
	var keys []string
	for i := 0; len(masters) < len(cl.Masters); i++ {
		k := fmt.Sprintf("%s-%d", uniqueKey(t), i)
		m, err := cl.MasterOf(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(masters, m) {
			masters, keys = append(masters, m), append(keys, k)
		}
	}
	return masters, keys
}
