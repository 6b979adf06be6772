package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// StartSentinel starts a Redis Sentinel (redis-server in sentinel mode) that monitors master
// under name with a quorum of 1, calls it down after 1 s without answers and gives a failover
// 5 s. It is started and stopped like any Server of this package (free port, its own
// directory, killed with the test binary); the test fails if it cannot be started.
func StartSentinel(tb testing.TB, master *Server, name string, opts ...Option) *Server {
	tb.Helper()
	cfg := newConfig(opts)
	cfg.lead = func(dir string) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
			"sentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 5000\n", name, master.Port())
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("redistest: sentinel config: %w", err)
		}
		return []string{conf, "--sentinel"}, nil
	}
	s, err := launch(cfg, nil)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	cleanupClose(tb, s)
	return s
}
