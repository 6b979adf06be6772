package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
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
	rdb := s.adminClient()
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
	replica := make(map[*Server]bool, len(c.Replicas))
	for _, n := range c.Replicas {
		replica[n] = true
	}
	err := c.poll(ctx, c.nodes, func(ctx context.Context, clients map[*Server]*redis.Client) error {
		return c.readyOnce(ctx, clients, replica)
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not ready within %v: %w", timeout, err)
	}
	return nil
}

// WaitOK waits until every running node reports cluster_state:ok and all
// running nodes agree on one slot map in which a running master serves every
// slot. Use it after a fault: a killed master whose replica takes over (a
// node-timeout of 2s plus an election), a restarted node rejoining. It
// returns the last reason it was not ok when ctx ends.
func (c *Cluster) WaitOK(ctx context.Context) error {
	running := map[string]bool{}
	var nodes []*Server
	for _, n := range c.nodes {
		if n.PID() != 0 {
			running[n.Addr()] = true
			nodes = append(nodes, n)
		}
	}
	want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": "16384"}
	err := c.poll(ctx, nodes, func(ctx context.Context, clients map[*Server]*redis.Client) error {
		var first string
		for n, rdb := range clients {
			if err := checkClusterInfo(ctx, n, rdb, want); err != nil {
				return err
			}
			slots, err := slotMap(ctx, rdb, running)
			if err != nil {
				return fmt.Errorf("%s: %w", n.Addr(), err)
			}
			if first == "" {
				first = slots
			} else if slots != first {
				return fmt.Errorf("nodes disagree on the slot map:\n%s\n%s", first, slots)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster not ok: %w", err)
	}
	return nil
}

// slotMap renders one node's CLUSTER SLOTS as sorted "start-end addr" lines,
// failing unless running masters serve all 16384 slots.
func slotMap(ctx context.Context, rdb *redis.Client, running map[string]bool) (string, error) {
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	covered := 0
	lines := make([]string, 0, len(ranges))
	for _, r := range ranges {
		if len(r.Nodes) == 0 || !running[r.Nodes[0].Addr] {
			return "", fmt.Errorf("slots %d-%d have no running master", r.Start, r.End)
		}
		covered += int(r.End - r.Start + 1)
		lines = append(lines, fmt.Sprintf("%05d-%05d %s", r.Start, r.End, r.Nodes[0].Addr))
	}
	if covered != 16384 {
		return "", fmt.Errorf("running masters serve %d of 16384 slots", covered)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// poll runs check with a client per node every 50ms until it passes or ctx
// ends; it returns check's last error joined with ctx's.
func (c *Cluster) poll(ctx context.Context, nodes []*Server, check func(context.Context, map[*Server]*redis.Client) error) error {
	clients := make(map[*Server]*redis.Client, len(nodes))
	for _, n := range nodes {
		clients[n] = n.adminClient()
	}
	defer func() {
		for _, rdb := range clients {
			_ = rdb.Close()
		}
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx, clients)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-tick.C:
		}
	}
}

func checkClusterInfo(ctx context.Context, n *Server, rdb *redis.Client, want map[string]string) error {
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
	return nil
}

func (c *Cluster) readyOnce(ctx context.Context, clients map[*Server]*redis.Client, replica map[*Server]bool) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
	}
	for n, rdb := range clients {
		if err := checkClusterInfo(ctx, n, rdb, want); err != nil {
			return err
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

// MasterOf returns the node that serves key's hash slot now (after a
// failover that may be a node listed in Replicas). It asks a running node.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Server, error) {
	var lastErr error
	for _, n := range c.nodes {
		if n.PID() == 0 {
			continue
		}
		addr, err := n.slotOwner(ctx, key)
		if err != nil {
			lastErr = err
			continue
		}
		for _, m := range c.nodes {
			if m.Addr() == addr {
				return m, nil
			}
		}
		return nil, fmt.Errorf("redistest: slot of %q is served by %s, not a node of this cluster", key, addr)
	}
	return nil, fmt.Errorf("redistest: no node answered for %q: %w", key, lastErr)
}

// slotOwner asks this node which address serves key's slot.
func (s *Server) slotOwner(ctx context.Context, key string) (string, error) {
	rdb := s.adminClient()
	defer rdb.Close()
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER KEYSLOT on %s: %w", s.Addr(), err)
	}
	ranges, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: CLUSTER SLOTS on %s: %w", s.Addr(), err)
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("redistest: %s knows no owner of slot %d", s.Addr(), slot)
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
