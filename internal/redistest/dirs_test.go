package redistest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// DyingOwnerEnv makes the test binary a child that starts a server and dies without closing
// it (see main_test.go).
const DyingOwnerEnv = "REDISTEST_DYING_OWNER"

// A test binary that dies without Close (timed out, a panic in a goroutine, killed) leaves no
// redis-server, and the next Launch's sweep removes its directory; a live server's directory
// stays.
func TestDeadOwnersDirIsRemoved(t *testing.T) {
	live, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Close() }()
	for _, mode := range []string{"exit", "panic", "sleep"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "child")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), DyingOwnerEnv+"="+mode, "REDISTEST_DYING_OUT="+out)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var line []byte
			for deadline := time.Now().Add(20 * time.Second); len(line) == 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatal("the child did not start its server")
				}
				line, _ = os.ReadFile(out)
			}
			if mode == "sleep" {
				_ = cmd.Process.Kill()
			}
			_ = cmd.Wait()
			f := strings.Fields(string(line))
			dir, pid := f[0], f[1]
			for deadline := time.Now().Add(5 * time.Second); running(pid); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					p, _ := strconv.Atoi(pid)
					_ = syscall.Kill(p, syscall.SIGKILL)
					t.Fatalf("redis-server %s outlived its test binary", pid)
				}
			}
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("the dead child's directory is gone before any sweep (%v): the test shows nothing", err)
			}
			sweepStaleDirs()
			if _, err := os.Stat(dir); err == nil {
				_ = os.RemoveAll(dir)
				t.Fatalf("directory %s of a dead test binary is left after the sweep", dir)
			}
			if _, err := os.Stat(live.Dir()); err != nil {
				t.Fatalf("the sweep removed a live server's directory: %v", err)
			}
		})
	}
}

// running reports whether process pid exists and is not a zombie.
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// launchAndDrop starts a server the way a caller that keeps only its address would (a
// TestMain that stores srv.Addr() in a variable and never closes it), and returns what is
// needed to check on it and clean up.
//
//go:noinline
func launchAndDrop(t *testing.T) (dir string, pid int) {
	srv, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	return srv.Dir(), srv.PID()
}

// A Server nobody references any more (never closed: its redis-server and its test binary
// still run) keeps its owner lock through garbage collection, so no sweep removes its
// directory (its log, a cluster node's nodes.conf, a sentinel's config).
func TestLiveServerDirSurvivesGC(t *testing.T) {
	dir, pid := launchAndDrop(t)
	defer func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(200 * time.Millisecond) // the reaper goroutine of start() returns
		_ = os.RemoveAll(dir)
	}()
	// Let the collector run as it would over a long test binary.
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("precondition: redis-server %d is gone: %v", pid, err)
	}
	sweepStaleDirs() // what another test binary's first Launch does
	if _, err := os.Stat(filepath.Join(dir, "redis.log")); err != nil {
		t.Fatalf("directory of redis-server %d (still running in a live process) was removed by the sweep: %v", pid, err)
	}
}
