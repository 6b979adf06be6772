package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/oteltest"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestReplicaAck(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	rdb := master.Client(t)
	rrdb := replica.Client(t)
	ctx := testContext(t, 20*time.Second)
	for rrdb.Info(ctx, "replication").Val() == "" || !containsLine(rrdb.Info(ctx, "replication").Val(), "master_link_status:up") {
		select {
		case <-ctx.Done():
			t.Fatal("replica never synced")
		case <-time.After(50 * time.Millisecond):
		}
	}
	o := oteltest.New(t)
	c := newClient(t, rdb, dlock.WithReplicaAck(1, time.Second), dlock.WithRetryInterval(100*time.Millisecond),
		dlock.WithTracerProvider(o.TP), dlock.WithMeterProvider(o.MP))
	key := uniqueKey(t)

	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The replica has the lock the moment Acquire returns.
	if n := rrdb.Exists(ctx, lockKeyOf(t, rdb, key)).Val(); n != 1 {
		t.Fatal("lock not on the replica when Acquire returned")
	}

	// A hand-off is confirmed on the replica before the waiter gets the lock.
	got := acquireAsync(t, c, ctx, key)
	waitQueued(t, rdb, ctx, key) // in line: the release hands it the lock
	_ = lk.Release(ctx)
	l2 := <-got
	if l2 == nil {
		t.FailNow()
	}
	if ttl := rrdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); ttl < 20*time.Second {
		t.Fatalf("replica has the handed-off lock with %v left: not confirmed to its full lease", ttl)
	}
	// The confirmation does not hide the hand-off from the waiter's span.
	if got := handedOffAttrs(o); !slices.Equal(got, []string{"false", "true"}) {
		t.Errorf("dlock.handed_off of the acquisitions, in the order they ended: %v, want [false true]", got)
	}
	_ = l2.Release(ctx)

	// Without a replica to acknowledge it, the acquisition fails and leaves no lock behind.
	if err := replica.Stop(); err != nil {
		t.Fatal(err)
	}
	short := newClient(t, rdb, dlock.WithReplicaAck(1, 100*time.Millisecond))
	if _, err := short.Acquire(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("acquire without a replica: %v, want ErrUnavailable", err)
	}
	plain := newClient(t, rdb)
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l3, err := plain.Acquire(wctx, key)
	if err != nil {
		t.Fatalf("unacknowledged lock left behind: %v", err)
	}
	_ = l3.Release(ctx)
}

func containsLine(info, line string) bool {
	for _, l := range splitLines(info) {
		if l == line {
			return true
		}
	}
	return false
}
