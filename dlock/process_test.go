package dlock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// helperEnv makes the test binary act as one of several processes sharing a counter.
const helperEnv = "DLOCK_TEST_COUNTER_PROCESS"

// counterProcess increments a shared counter n times under the lock, with a plain GET and SET.
func counterProcess() error {
	addr, key := os.Getenv("DLOCK_TEST_ADDR"), os.Getenv("DLOCK_TEST_KEY")
	n, err := strconv.Atoi(os.Getenv("DLOCK_TEST_N"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range n {
		err := c.Do(ctx, key, func(ctx context.Context) error {
			v, err := rdb.Get(ctx, key+":counter").Int()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			return rdb.Set(ctx, key+":counter", v+1, 0).Err()
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func TestMutualExclusionAcrossProcesses(t *testing.T) {
	srv, rdb, _ := setup(t)
	ctx := testContext(t, 90*time.Second)
	key := uniqueKey(t)
	const procs, n = 3, 200
	cmds := make([]*exec.Cmd, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "DLOCK_TEST_ADDR="+srv.Addr(),
			"DLOCK_TEST_KEY="+key, "DLOCK_TEST_N="+strconv.Itoa(n))
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	if v, _ := rdb.Get(ctx, key+":counter").Int(); v != procs*n {
		t.Fatalf("counter = %d, want %d", v, procs*n)
	}
}

// waiterEnv makes the test binary a process that waits for the lock once and prints
// "obtained <token> <unix ns>" or "error <err>".
const waiterEnv = "DLOCK_TEST_WAITER_PROCESS"

func waiterProcess() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_TEST_ADDR")})
	defer rdb.Close()
	c := dlock.New(rdb, dlock.WithRetryInterval(100*time.Millisecond))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lk, err := c.Acquire(ctx, os.Getenv("DLOCK_TEST_KEY"))
	if err != nil {
		fmt.Printf("error %v\n", err)
		return
	}
	fmt.Printf("obtained %d %d\n", lk.Token(), time.Now().UnixNano())
	_ = lk.Release(ctx)
}

// A waiter whose process is paused (GC, SIGSTOP, a VM migration) while the lock is handed to
// it does not take it up before the claim lease ends, and the lock goes on to the next in
// line. When it resumes, the old hand-off notice is still in its listener. It must neither
// take that notice for the lock (another process holds it) nor give up: it waits on and gets
// the lock, with a newer token, once the holder releases it.
func TestPausedWaiterIgnoresStaleHandOff(t *testing.T) {
	srv, rdb, c := setup(t, dlock.WithRetryInterval(100*time.Millisecond)) // claim lease 300 ms
	ctx := testContext(t, 60*time.Second)
	for round := range 3 {
		key := uniqueKey(t)
		holder, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		cmd, out := startHelper(t, waiterEnv+"=1", "DLOCK_TEST_ADDR="+srv.Addr(), "DLOCK_TEST_KEY="+key)
		qkey := redisName(key, "q")
		waitLine(t, ctx, rdb, qkey, 1) // the waiter is in line
		// and subscribed: the hand-off notice reaches its connection while it is stopped.
		waitChannel(t, ctx, rdb, key, true)
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		// The signal stops every thread of the waiter soon, not at once; on a loaded machine
		// a thread could still take the hand-off up before it stops. Wait until all are.
		waitStopped(t, cmd.Process.Pid)
		if err := holder.Release(ctx); err != nil { // handed to the paused waiter
			t.Fatal(err)
		}
		next, err := newClient(t, rdb, dlock.WithRetryInterval(100*time.Millisecond)).Acquire(ctx, key)
		if err != nil { // after the waiter's claim lease ran out
			t.Fatal(err)
		}
		// The hand-off took the waiter out of line, and next left it when it got the lock.
		waitLine(t, ctx, rdb, qkey, 0)
		_ = cmd.Process.Signal(syscall.SIGCONT)
		// The waiter sees its stale notice (and looks, or fails to confirm the hand-off, and
		// waits as a new waiter): it is back in line.
		waitLine(t, ctx, rdb, qkey, 1)
		freed := time.Now()
		if err := next.Release(ctx); err != nil {
			t.Fatalf("round %d: the next holder lost the lock: %v", round, err)
		}
		line, _ := out.ReadString('\n')
		_ = cmd.Wait()
		var token, at int64
		if _, err := fmt.Sscanf(line, "obtained %d %d", &token, &at); err != nil {
			t.Fatalf("round %d: waiter said %q, want it to obtain the lock", round, line)
		}
		if token <= next.Token() || time.Unix(0, at).Before(freed) {
			t.Fatalf("round %d: waiter obtained token %d at %s, but token %d was held until %s",
				round, token, time.Unix(0, at).Format(time.StampMicro), next.Token(), freed.Format(time.StampMicro))
		}
	}
}

// startHelper starts the test binary as a helper process with env added to its
// environment (which names what it does, see helperProcessMain), and returns it with a
// reader of its standard output; its standard error is the test's.
func startHelper(t *testing.T, env ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewReader(out)
}

// waitStopped waits until every thread of process pid is stopped (state T in /proc).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			// The state follows the command name in parentheses: "pid (comm) S ...".
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

func helperProcessMain() bool {
	switch {
	case os.Getenv(waiterEnv) != "":
		waiterProcess()
	case os.Getenv(stalledProbeEnv) != "":
		stalledProbeProcess()
	case os.Getenv(helperEnv) != "":
		if err := counterProcess(); err != nil {
			fmt.Fprintln(os.Stderr, "counter process:", err)
			os.Exit(1)
		}
	default:
		return false
	}
	os.Exit(0)
	return true
}
