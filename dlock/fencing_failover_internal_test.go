package dlock

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// A promoted replica that missed the last grant, but still has the lock's hash (a release
// keeps it for the rest of its lease), must not hand out that grant's token again: two
// holders with one token would both pass a fence that accepts equal tokens (the holder's own
// later writes). Tokens follow the server clock, so the new one is above the lost one.
func TestTokensIncreaseAfterFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	mrdb, rrdb := master.Client(t), replica.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(rrdb.Info(ctx, "replication").Val(), "master_link_status:up") {
		select {
		case <-ctx.Done():
			t.Fatal("replica never synced")
		case <-time.After(50 * time.Millisecond):
		}
	}
	onMaster := New(mrdb)
	defer onMaster.Close()
	key := t.Name()
	lockKey := "lockguard:{" + key + "}:lock"

	// Earlier traffic on the key: taken and released, the hash (token) replicated.
	lk0, err := onMaster.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	want := strconv.FormatInt(lk0.Token(), 10)
	for rrdb.HGet(ctx, lockKey, "t").Val() != want {
		select {
		case <-ctx.Done():
			t.Fatal("token never reached the replica")
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The link breaks; A takes the lock on the master, which then dies; the replica is
	// promoted, and B takes the lock there.
	if err := rrdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	a, err := onMaster.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Release(ctx) }()
	onPromoted := New(rrdb)
	defer onPromoted.Close()
	b, err := onPromoted.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Release(ctx) }()
	if b.Token() <= a.Token() {
		t.Fatalf("after the failover the new holder's token %d is not above the lost holder's %d "+
			"(same clock: the replica's is not behind at all)", b.Token(), a.Token())
	}
}

// WithRetryInterval keeps three intervals (the claim lease and the waiters' liveness) a
// representable duration: a very long interval is capped at an hour.
func TestLongRetryIntervalIsBounded(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = rdb.Close() }()
	c := New(rdb, WithRetryInterval(100*365*24*time.Hour))
	defer func() { _ = c.Close() }()
	b := c.be.(*redisBackend)
	if c.cfg.retry != time.Hour || b.claim != 3*time.Hour || b.live != 3*time.Hour {
		t.Fatalf("retry interval %v: claim lease %v, waiter liveness %v; want 1h, 3h, 3h", c.cfg.retry, b.claim, b.live)
	}
}
