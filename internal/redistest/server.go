package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// launchAttempts bounds the retries on another port when a start loses its
// port to a process outside this package.
const launchAttempts = 10

// stopGrace is how long Stop waits after SIGTERM before it sends SIGKILL.
const stopGrace = 10 * time.Second

// errPortTaken marks a start that failed because another process bound the
// port first; Launch retries those on another port.
var errPortTaken = errors.New("redistest: port taken by another process")

// Server is one redis-server process on 127.0.0.1. Its port and temporary
// directory stay the same across Stop, Kill and Restart until Close. All
// methods are safe for concurrent use.
type Server struct {
	port     int
	portLock *os.File // flock held until Close; see portLockDir
	dir      string
	dirLock  *os.File // flock held until Close; see ownerLock
	bin      string
	args     []string
	cfg      config

	mu     sync.Mutex
	proc   *process // nil while the server is down
	closed bool
}

// process is one run of redis-server; Restart makes a new one.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// Launch starts a redis-server and waits until it answers. It has no testing
// dependency, so programs such as a demo can use it; the caller must Close
// the server. It fails when redis-server cannot be found or does not answer
// within the start timeout (the error includes the log tail).
func Launch(opts ...Option) (*Server, error) {
	return launch(newConfig(opts), nil)
}

// Start is Launch for tests: it fails tb (never skips) when the server cannot
// be started, and stops it and removes its directory at tb.Cleanup.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := Launch(opts...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	cleanupClose(tb, s)
	return s
}

// StartN starts n independent servers concurrently, as Start does.
func StartN(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	cfg := newConfig(opts)
	servers, err := launchN(n, func() (*Server, error) { return launch(cfg, nil) })
	if err != nil {
		tb.Fatalf("%v", err)
	}
	for _, s := range servers {
		cleanupClose(tb, s)
	}
	return servers
}

func cleanupClose(tb testing.TB, s *Server) {
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("redistest: close %s: %v", s.Addr(), err)
		}
	})
}

// launchN runs launch n times concurrently; on any failure it closes the
// servers that did start and returns all the errors.
func launchN(n int, launch func() (*Server, error)) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { servers[i], errs[i] = launch() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = closeAll(servers)
		return nil, err
	}
	return servers, nil
}

func closeAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if s != nil {
			wg.Go(func() { errs[i] = s.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// launch starts a server; extra adds arguments that depend on its directory
// (the cluster's nodes.conf).
func launch(cfg config, extra func(dir string) []string) (*Server, error) {
	bin, err := serverBinary()
	if err != nil {
		return nil, err
	}
	dir, dirLock, err := makeDir()
	if err != nil {
		return nil, err
	}
	var lead []string
	if cfg.lead != nil {
		if lead, err = cfg.lead(dir); err != nil {
			_ = os.RemoveAll(dir)
			_ = dirLock.Close()
			return nil, err
		}
	}
	var lastErr error
	for range launchAttempts {
		port, lock, err := pickPort()
		if err != nil {
			lastErr = err
			break
		}
		s := &Server{port: port, portLock: lock, dir: dir, dirLock: dirLock, bin: bin, cfg: cfg}
		s.args = append(append([]string(nil), lead...), serverArgs(port, dir)...)
		if extra != nil {
			s.args = append(s.args, extra(dir)...)
		}
		s.args = append(s.args, cfg.args...)
		if lastErr = s.start(); lastErr == nil {
			keep(lock, dirLock)
			return s, nil
		}
		_ = lock.Close()
		if !errors.Is(lastErr, errPortTaken) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	_ = dirLock.Close()
	return nil, lastErr
}

func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}
}

// Addr returns "127.0.0.1:port"; it does not change across restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port (20000-22767).
func (s *Server) Port() int { return s.port }

// Dir returns the server's temporary directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// PID returns the process id of the running redis-server, or 0 while it is down.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Options returns fresh go-redis options for this server (go-redis defaults
// otherwise), for callers that build and close their own client.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr()}
}

// Client returns a client for this server, with opts applied to Options();
// it is closed at tb.Cleanup.
func (s *Server) Client(tb testing.TB, opts ...func(*redis.Options)) *redis.Client {
	tb.Helper()
	o := s.Options()
	for _, f := range opts {
		f(o)
	}
	rdb := redis.NewClient(o)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Flush runs FLUSHALL.
func (s *Server) Flush(ctx context.Context) error {
	return s.do(ctx, "FLUSHALL")
}

// Pause runs CLIENT PAUSE d ALL: the server holds every other client's
// commands for d, then answers them. It returns once the pause is in effect.
func (s *Server) Pause(ctx context.Context, d time.Duration) error {
	return s.do(ctx, "CLIENT", "PAUSE", max(d.Milliseconds(), 1), "ALL")
}

// SetFull makes the server refuse every write that may grow memory (maxmemory
// of 1 byte: with the default maxmemory-policy noeviction, an OOM error and
// nothing evicted), or, with full false, lifts the limit again.
func (s *Server) SetFull(ctx context.Context, full bool) error {
	limit := "0"
	if full {
		limit = "1"
	}
	return s.do(ctx, "CONFIG", "SET", "maxmemory", limit)
}

// adminClient is a one-connection client with no retries, so a fault helper
// reports a down server at once; the caller closes it.
func (s *Server) adminClient() *redis.Client {
	o := s.Options()
	o.PoolSize = 1
	o.MaxRetries = -1
	return redis.NewClient(o)
}

// do runs one command on a short-lived connection.
func (s *Server) do(ctx context.Context, args ...any) error {
	rdb := s.adminClient()
	defer rdb.Close()
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redistest: %v on %s: %w", args, s.Addr(), err)
	}
	return nil
}

// Stop shuts the server down gracefully (SIGTERM; no data is saved) and
// waits for it to exit, sending SIGKILL if it takes longer than 10s. Stopping
// a server that is down does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGTERM)
}

// Kill sends SIGKILL to the server's process group and waits for it to exit.
// Killing a server that is down does nothing.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(syscall.SIGKILL)
}

// Restart starts the server again on the same port and directory, with empty
// data (nothing is persisted), and waits until it answers. A running server
// is stopped first. It fails if another process took the port meanwhile.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: restart %s: server is closed", s.Addr())
	}
	if err := s.stopLocked(syscall.SIGTERM); err != nil {
		return err
	}
	return s.start()
}

// Close kills the server and removes its directory. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stopLocked(syscall.SIGKILL)
	unkeep(s.portLock, s.dirLock)
	return errors.Join(err, s.portLock.Close(), os.RemoveAll(s.dir), s.dirLock.Close())
}

func (s *Server) stopLocked(sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	pid := p.cmd.Process.Pid
	target := pid
	if sig == syscall.SIGKILL {
		target = -pid // the whole group
	}
	var err error
	if e := syscall.Kill(target, sig); e != nil && !errors.Is(e, syscall.ESRCH) {
		err = fmt.Errorf("redistest: signal %v to %d: %w", sig, pid, e)
	}
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-p.done:
	case <-grace.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	}
	// Kill anything the server forked (a replication or save child); the
	// group outlives its leader while such a child runs.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return err
}
