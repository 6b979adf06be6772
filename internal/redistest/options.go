package redistest

import "time"

// Option configures a server started by Launch, Start or StartN.
type Option func(*config)

type config struct {
	args         []string
	startTimeout time.Duration
	// lead, when set, returns the arguments that go before the others (a sentinel's config
	// file and --sentinel), given the server's directory.
	lead func(dir string) ([]string, error)
}

func newConfig(opts []Option) config {
	c := config{startTimeout: 10 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithArgs appends extra redis-server arguments, for example
// WithArgs("--enable-debug-command", "local"). They come after the
// harness's own arguments, so they can override them. Default: none.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithStartTimeout bounds how long a start (or Restart) waits for the server
// to answer. Default: 10s.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.startTimeout = d
		}
	}
}

// ClusterOption configures a cluster started by LaunchCluster or StartCluster.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	masters   int
	replicas  int
	nodeOpts  []Option
	readyWait time.Duration
}

func newClusterConfig(opts []ClusterOption) clusterConfig {
	c := clusterConfig{masters: 3, readyWait: 30 * time.Second}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithReplicas gives every master n replicas (redis-cli --cluster-replicas n).
// Default: 0.
func WithReplicas(n int) ClusterOption {
	return func(c *clusterConfig) {
		if n >= 0 {
			c.replicas = n
		}
	}
}

// WithMasters sets the number of masters; Redis Cluster needs at least 3,
// smaller values are raised to 3. Default: 3.
func WithMasters(n int) ClusterOption {
	return func(c *clusterConfig) { c.masters = max(n, 3) }
}

// WithNodeOptions applies server options (such as WithArgs) to every node.
func WithNodeOptions(opts ...Option) ClusterOption {
	return func(c *clusterConfig) { c.nodeOpts = append(c.nodeOpts, opts...) }
}

// WithClusterReadyTimeout bounds the wait for cluster_state:ok on every node
// after the cluster is created. Default: 30s.
func WithClusterReadyTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) {
		if d > 0 {
			c.readyWait = d
		}
	}
}
