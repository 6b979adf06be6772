package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	if len(c.Masters) != 3 || len(c.Replicas) != 0 {
		t.Fatalf("got %d masters and %d replicas, want 3 and 0", len(c.Masters), len(c.Replicas))
	}
	ctx := t.Context()
	rdb := c.Client(t)

	const keys = 200
	for i := range keys {
		if err := rdb.Set(ctx, fmt.Sprintf("key:%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	for i := range keys {
		got, err := rdb.Get(ctx, fmt.Sprintf("key:%d", i)).Int()
		if err != nil || got != i {
			t.Fatalf("GET key:%d = %d, %v", i, got, err)
		}
	}

	// The keys must have landed on every master, not just one.
	total := int64(0)
	for _, m := range c.Masters {
		n, err := m.Client(t).DBSize(ctx).Result()
		if err != nil {
			t.Fatalf("DBSIZE on %s: %v", m.Addr(), err)
		}
		if n == 0 {
			t.Errorf("master %s holds no keys", m.Addr())
		}
		total += n
	}
	if total != keys {
		t.Fatalf("masters hold %d keys in all, want %d", total, keys)
	}

	nodes, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	if got := countRoles(nodes, "master"); got != 3 {
		t.Fatalf("CLUSTER NODES shows %d masters, want 3:\n%s", got, nodes)
	}
}

func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.WithReplicas(1))
	if len(c.Masters) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("got %d masters and %d replicas, want 3 and 3", len(c.Masters), len(c.Replicas))
	}
	if len(c.Addrs()) != 6 {
		t.Fatalf("Addrs() has %d entries, want 6", len(c.Addrs()))
	}
	rdb := c.Client(t)
	nodes, err := rdb.ClusterNodes(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	if m, r := countRoles(nodes, "master"), countRoles(nodes, "slave"); m != 3 || r != 3 {
		t.Fatalf("CLUSTER NODES shows %d masters and %d replicas, want 3 and 3:\n%s", m, r, nodes)
	}
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
}

// countRoles counts the CLUSTER NODES lines whose flags include role.
func countRoles(nodes, role string) int {
	n := 0
	for line := range strings.Lines(nodes) {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		for flag := range strings.SplitSeq(fields[2], ",") {
			if flag == role {
				n++
			}
		}
	}
	return n
}

func TestClusterMasterOf(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	ctx := t.Context()
	rdb := c.Client(t)
	for i := range 20 {
		key := fmt.Sprintf("owner:%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m, err := c.MasterOf(ctx, key)
		if err != nil {
			t.Fatalf("MasterOf(%s): %v", key, err)
		}
		if n, err := m.Client(t).Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("%s not on MasterOf's node %s: EXISTS = %d, %v", key, m.Addr(), n, err)
		}
	}
}

func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.WithReplicas(1))
	ctx := t.Context()
	rdb := c.Client(t)
	const key = "failover"
	old, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatalf("MasterOf: %v", err)
	}
	if err := old.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	start := time.Now()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitOK(waitCtx); err != nil {
		t.Fatalf("WaitOK after killing a master: %v", err)
	}
	t.Logf("cluster ok again %v after the master was killed", time.Since(start))
	promoted, err := c.MasterOf(ctx, key)
	if err != nil {
		t.Fatalf("MasterOf after failover: %v", err)
	}
	if promoted == old || !slices.Contains(c.Replicas, promoted) {
		t.Fatalf("after failover %s serves the slot; want one of the replicas", promoted.Addr())
	}
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET after failover: %v", err)
	}

	// The old master comes back empty and rejoins as a replica.
	if err := old.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := c.WaitOK(waitCtx); err != nil {
		t.Fatalf("WaitOK after restarting the old master: %v", err)
	}
}
