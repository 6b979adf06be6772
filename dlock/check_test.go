package dlock_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestCheckEviction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		unsafe bool
	}{
		{"defaults", nil, false},
		{"noeviction with a limit", []string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, false},
		{"eviction policy without a limit", []string{"--maxmemory-policy", "allkeys-lru"}, false},
		{"allkeys-lru with a limit", []string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}, true},
		// Every lock key has an expiry, so the volatile policies may pick held locks too.
		{"volatile-ttl with a limit", []string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.WithArgs(tc.args...))
			c := newClient(t, srv.Client(t))
			err := c.Check(testContext(t, 10*time.Second))
			if !tc.unsafe {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, dlock.ErrUnsafeStore) || errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("Check = %v, want ErrUnsafeStore alone", err)
			}
			policy := tc.args[len(tc.args)-1]
			for _, want := range []string{srv.Addr(), "maxmemory 104857600 bytes", "maxmemory-policy " + policy, "set maxmemory-policy noeviction"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Check = %q, want it to say %q", err, want)
				}
			}
		})
	}
}

// TestCheckClusterNamesEachUnsafeNode: on a Cluster every master and replica is asked, and
// only the unsafe ones are named.
func TestCheckClusterNamesEachUnsafeNode(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithReplicas(1))
	rdb := cl.Client(t)
	c := newClient(t, rdb)
	ctx := testContext(t, 30*time.Second)
	// Redis lists a replica in CLUSTER SLOTS, where the client learns of it, once it has
	// replicated something and the other nodes heard so: write to every master and wait for
	// every node (the client asks any of them) to list every replica.
	for i := range 30 {
		if err := rdb.Set(ctx, fmt.Sprintf("warm-%d", i), "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range append(slices.Clone(cl.Masters), cl.Replicas...) {
		nc := node.Client(t)
		for {
			slots, err := nc.ClusterSlots(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			listed := 0
			for _, s := range slots {
				listed += len(s.Nodes) - 1
			}
			if listed == len(cl.Replicas) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("CLUSTER SLOTS of %s lists %d of %d replicas", node.Addr(), listed, len(cl.Replicas))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check on a default cluster = %v, want nil", err)
	}
	master, replica := cl.Masters[1], cl.Replicas[0]
	for _, srv := range []*redistest.Server{master, replica} {
		if err := srv.Client(t).ConfigSet(ctx, "maxmemory", "64mb").Err(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Client(t).ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Check(ctx)
	if !errors.Is(err, dlock.ErrUnsafeStore) {
		t.Fatalf("Check = %v, want ErrUnsafeStore", err)
	}
	for _, srv := range cl.Masters {
		named := strings.Contains(err.Error(), srv.Addr()+" ")
		if named != (srv == master) {
			t.Errorf("Check = %q: names master %s: %v, want %v", err, srv.Addr(), named, srv == master)
		}
	}
	if !strings.Contains(err.Error(), replica.Addr()+" ") {
		t.Errorf("Check = %q, want it to name the replica %s", err, replica.Addr())
	}
}

// TestCheckRefused: a server that refuses INFO to the Client's user is reported as not
// checked (ErrUnavailable), never as safe.
func TestCheckRefused(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testContext(t, 10*time.Second)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "app", "secret" }))
	err := c.Check(ctx)
	if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrUnsafeStore) {
		t.Fatalf("Check = %v, want ErrUnavailable alone", err)
	}
	if !strings.Contains(err.Error(), "INFO memory") || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Check = %q, want it to name the refused command and Redis's answer", err)
	}
	// The user can still lock: only the check needs INFO.
	lk, err := c.TryAcquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCheckUnreachableAndClosed(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 }))
	ctx := testContext(t, 10*time.Second)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx); !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrUnsafeStore) {
		t.Fatalf("Check on a stopped server = %v, want ErrUnavailable", err)
	}
	_ = c.Close()
	if err := c.Check(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("Check after Close = %v, want ErrClosed", err)
	}
}

// TestCheckBehindSentinel: a failover client is checked on its current master.
func TestCheckBehindSentinel(t *testing.T) {
	master := redistest.Start(t, redistest.WithArgs("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lfu"))
	sentinel := redistest.StartSentinel(t, master, "lg").Addr()
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "lg", SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	err := c.Check(testContext(t, 10*time.Second))
	if !errors.Is(err, dlock.ErrUnsafeStore) || !strings.Contains(err.Error(), "the master behind Sentinel deletes keys when full") ||
		!strings.Contains(err.Error(), "allkeys-lfu") {
		t.Fatalf("Check = %v, want ErrUnsafeStore naming the Sentinel master and its policy", err)
	}
}
