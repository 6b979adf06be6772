// Package redistest starts real, throwaway redis-server processes for tests
// and demos: one server, N independent servers, or a Redis Cluster, plus the
// fault helpers that lock tests need (stop, kill, restart on the same port,
// flush, pause).
//
// Usage in a test:
//
//	func TestSomething(t *testing.T) {
//		srv := redistest.Start(t) // stopped and removed at t.Cleanup
//		rdb := srv.Client(t)      // closed at t.Cleanup
//		_ = rdb.Set(t.Context(), "k", "v", 0).Err()
//		_ = srv.Restart() // same port, empty data
//	}
//
// Each server listens on 127.0.0.1 on a port in 20000-22767 (never 6379), so
// its cluster bus port (port+10000) stays below the Linux ephemeral range. It
// runs with no persistence (--save "" --appendonly no) in its own temporary
// directory, which also holds its log; a start failure reports the log tail.
// Package test binaries run concurrently, so a server holds a per-user lock
// file on its port until Close (a Restart finds its port still free), and a
// start that loses its port to an outside process retries on another port.
//
// StartSentinel starts a Redis Sentinel watching a server, the same way.
//
// A cluster (StartCluster) has 3 masters and, with WithReplicas(n), n
// replicas each, with a 2s cluster-node-timeout so failover tests are quick;
// after a fault, Cluster.WaitOK waits for a healthy slot map again and
// Cluster.MasterOf says which node serves a key now.
//
// Guarantees: every process is in its own process group and, on Linux, gets
// SIGKILL when the test binary dies (Pdeathsig), so a crashed or timed-out
// test leaves no redis-server behind. Start never skips: when redis-server is
// missing the test fails with a message saying how to install it.
//
// Not guaranteed: Restart reuses the port, so it fails if a process outside
// this package took the port while the server was down. A test binary that
// dies without Close (killed, timed out) leaves its servers' temporary directories
// behind until the next Launch of this user, which removes every directory whose
// owner process is gone. Restarting a cluster node keeps
// its nodes.conf (identity and slots) but not its data. The package needs a
// Unix system; the Pdeathsig protection is Linux only.
//
// The binaries are found with exec.LookPath; the environment variables
// REDIS_SERVER_BIN and REDIS_CLI_BIN override them.
package redistest
