package dlock_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// stalledProbeEnv makes the test binary a process that waits for a busy lock until its
// deadline and stops itself (SIGSTOP) as soon as the probe sent at the end of the wait is
// written; the test resumes it. It prints "probe" when it stops, then "busy=<bool>
// down=<bool> deadline=<bool>" for the error of the wait.
const stalledProbeEnv = "DLOCK_TEST_STALLED_PROBE_PROCESS"

// probeSHA is the SHA1 of dlock's probe script, by which its EVALSHA is recognised on the
// wire.
var probeSHA = func() string { s := sha1.Sum([]byte("return 1")); return hex.EncodeToString(s[:]) }()

// stopAtProbe is a connection that stops its process right after it wrote the probe: its
// answer comes while the process is stopped, as when a container is throttled.
type stopAtProbe struct {
	net.Conn
	armed *atomic.Bool
}

func (c stopAtProbe) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, []byte(probeSHA)) && c.armed.CompareAndSwap(true, false) {
		fmt.Println("probe")
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	return n, err
}

func stalledProbeProcess() {
	var armed atomic.Bool
	armed.Store(true)
	rdb := redis.NewClient(&redis.Options{
		Addr:                  os.Getenv("DLOCK_TEST_ADDR"),
		ContextTimeoutEnabled: os.Getenv("DLOCK_TEST_CTX_TIMEOUTS") == "1",
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return stopAtProbe{Conn: conn, armed: &armed}, nil
		},
	})
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond) // under the 1 s retry interval
	defer cancel()
	lk, err := c.Acquire(ctx, os.Getenv("DLOCK_TEST_KEY"))
	if err == nil {
		_ = lk.Release(context.Background())
	}
	fmt.Printf("busy=%v down=%v deadline=%v err=%v\n", errors.Is(err, dlock.ErrNotObtained),
		errors.Is(err, dlock.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), err)
}

// A process stopped for 150 ms (container CPU throttling, SIGSTOP) right after it sent the
// probe that ends a wait on a busy lock finds, when it runs again, the probe's answer
// waiting in its socket and the probe's 100 ms bound passed. Redis answered at once: the
// wait ran out on a busy lock (ErrNotObtained), not on a silent store (ErrUnavailable),
// which ginlock would answer with 503 instead of 409.
func TestStalledProcessProbeIsNotSilentStore(t *testing.T) {
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			srv, rdb, c := setup(t)
			ctx := testContext(t, 30*time.Second)
			for round := range 3 {
				key := uniqueKey(t)
				held, err := c.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				env := []string{stalledProbeEnv + "=1", "DLOCK_TEST_ADDR=" + srv.Addr(), "DLOCK_TEST_KEY=" + key}
				if ctxTimeouts {
					env = append(env, "DLOCK_TEST_CTX_TIMEOUTS=1")
				}
				cmd, lines := startHelper(t, env...)
				line, _ := lines.ReadString('\n')
				if strings.TrimSpace(line) != "probe" {
					_ = cmd.Wait()
					t.Fatalf("round %d: precondition: the wait sent no probe; it said %q", round, line)
				}
				waitStopped(t, cmd.Process.Pid)
				time.Sleep(150 * time.Millisecond) // a deliberate window: stopped past the probe's 100 ms bound
				_ = cmd.Process.Signal(syscall.SIGCONT)
				line, _ = lines.ReadString('\n')
				_ = cmd.Wait()
				_ = held.Release(ctx)
				if n, _ := rdb.Exists(ctx, redisName(key, "q")).Result(); n != 0 {
					t.Errorf("round %d: the waiter stayed in line", round)
				}
				if !strings.HasPrefix(line, "busy=true down=false deadline=true") {
					t.Fatalf("round %d: process stopped while its probe was in flight, Redis answering: %s"+
						"want ErrNotObtained and the deadline, not ErrUnavailable", round, line)
				}
			}
		})
	}
}
