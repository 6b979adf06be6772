package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// createTimeout bounds redis-cli --cluster create.
const createTimeout = time.Minute

// Cluster is a Redis Cluster of throwaway servers. Masters and Replicas hold
// the roles given at creation; a failover during a test does not update them.
type Cluster struct {
	// Masters are the nodes that own the 16384 slots at creation.
	Masters []*Server
	// Replicas are the replica nodes (WithReplicas), in no particular order.
	Replicas []*Server

	nodes []*Server
}

// LaunchCluster starts the nodes, joins them with redis-cli --cluster create
// and waits until every node reports cluster_state:ok, all slots assigned and
// every node known (and every replica's link to its master up). The caller
// must Close the cluster.
func LaunchCluster(opts ...ClusterOption) (*Cluster, error) {
	cfg := newClusterConfig(opts)
	cli, err := cliBinary()
	if err != nil {
		return nil, err
	}
	nodeCfg := newConfig(cfg.nodeOpts)
	total := cfg.masters * (1 + cfg.replicas)
	nodes, err := launchN(total, func() (*Server, error) {
		return launch(nodeCfg, clusterArgs)
	})
	if err != nil {
		return nil, err
	}
	c := &Cluster{nodes: nodes}
	if err := c.create(cli, cfg.replicas); err != nil {
		_ = c.Close()
		return nil, err
	}
	if err := c.waitReady(cfg.readyWait); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// StartCluster is LaunchCluster for tests: it fails tb (never skips) when the
// cluster cannot be started, and closes it at tb.Cleanup.
func StartCluster(tb testing.TB, opts ...ClusterOption) *Cluster {
	tb.Helper()
	c, err := LaunchCluster(opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Errorf("redistest: close cluster: %v", err)
		}
	})
	return c
}

func clusterArgs(dir string) []string {
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		// Short, so that failover tests finish quickly.
		"--cluster-node-timeout", "2000",
		// Replicas sync at once instead of after the 5s diskless-sync delay.
		"--repl-diskless-sync-delay", "0",
	}
}

func (c *Cluster) create(cli string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	if replicas > 0 {
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas))
	}
	args = append(args, "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redistest: redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}

	// redis-cli picks the roles; ask each node which one it got.
	for _, n := range c.nodes {
		role, err := n.role(ctx)
		if err != nil {
			return err
		}
		if role == "master" {
			c.Masters = append(c.Masters, n)
		} else {
			c.Replicas = append(c.Replicas, n)
		}
	}
	return nil
}

func (s *Server) role(ctx context.Context) (string, error) {
	rdb := redis.NewClient(s.Options())
	defer rdb.Close()
	v, err := rdb.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) == 0 {
		return "", fmt.Errorf("redistest: ROLE on %s: %v %w", s.Addr(), v, err)
	}
	role, _ := v[0].(string)
	return role, nil
}

// waitReady polls every node until the cluster looks whole from each of them.
func (c *Cluster) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	clients := make(map[*Server]*redis.Client, len(c.nodes))
	for _, n := range c.nodes {
		clients[n] = redis.NewClient(n.Options())
	}
	defer func() {
		for _, rdb := range clients {
			_ = rdb.Close()
		}
	}()
	replica := make(map[*Server]bool, len(c.Replicas))
	for _, n := range c.Replicas {
		replica[n] = true
	}

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.readyOnce(ctx, clients, replica)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not ready within %v: %w", timeout, err)
		case <-tick.C:
		}
	}
}

func (c *Cluster) readyOnce(ctx context.Context, clients map[*Server]*redis.Client, replica map[*Server]bool) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
	}
	for n, rdb := range clients {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr(), err)
		}
		fields := infoFields(info)
		for k, v := range want {
			if fields[k] != v {
				return fmt.Errorf("%s has %s:%s, want %s", n.Addr(), k, fields[k], v)
			}
		}
		nodes, err := rdb.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("CLUSTER NODES on %s: %w", n.Addr(), err)
		}
		if err := c.checkView(nodes); err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if !replica[n] {
			continue
		}
		repl, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", n.Addr(), err)
		}
		if link := infoFields(repl)["master_link_status"]; link != "up" {
			return fmt.Errorf("replica %s has master_link_status:%s", n.Addr(), link)
		}
	}
	return nil
}

// checkView reports whether one node's CLUSTER NODES agrees with the roles
// redis-cli gave (gossip spreads a new replica's role a moment later) and
// sees every link connected.
func (c *Cluster) checkView(nodes string) error {
	masters, replicas := 0, 0
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		for flag := range strings.SplitSeq(f[2], ",") {
			switch flag {
			case "master":
				masters++
			case "slave":
				replicas++
			case "handshake", "noaddr", "fail", "fail?":
				return fmt.Errorf("node %s is %s", f[1], f[2])
			}
		}
		if f[7] != "connected" {
			return fmt.Errorf("node %s link is %s", f[1], f[7])
		}
	}
	if masters != len(c.Masters) || replicas != len(c.Replicas) {
		return fmt.Errorf("sees %d masters and %d replicas, want %d and %d",
			masters, replicas, len(c.Masters), len(c.Replicas))
	}
	return nil
}

// infoFields parses "key:value" lines of INFO and CLUSTER INFO replies.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.SplitSeq(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// Nodes returns every node, masters and replicas, in start order.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// Addrs returns the address of every node, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Options returns fresh cluster client options: every node as a seed and
// ClusterStateReloadInterval of 1s (go-redis's 60s default leaves a client
// unable to write a failed-over slot for a minute).
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                      c.Addrs(),
		ClusterStateReloadInterval: time.Second,
	}
}

// Client returns a cluster client with opts applied to Options(); it is
// closed at tb.Cleanup.
func (c *Cluster) Client(tb testing.TB, opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	tb.Helper()
	o := c.Options()
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClusterClient(o)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Close kills every node and removes their directories. It is idempotent.
func (c *Cluster) Close() error {
	if err := closeAll(c.nodes); err != nil {
		return errors.Join(errors.New("redistest: close cluster"), err)
	}
	return nil
}
