package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if srv.Port() < 20000 || srv.Port() > 22767 {
		t.Fatalf("port %d outside 20000-22767", srv.Port())
	}
	ctx := t.Context()
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	addr, pid := srv.Addr(), srv.PID()

	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if srv.PID() != 0 {
		t.Fatalf("PID after Stop = %d, want 0", srv.PID())
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}

	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.Addr() != addr {
		t.Fatalf("Addr after Restart = %s, want %s", srv.Addr(), addr)
	}
	if srv.PID() == pid || srv.PID() == 0 {
		t.Fatalf("PID after Restart = %d (before %d), want a new process", srv.PID(), pid)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil (no persistence)", err)
	}
}

func TestRestartWhileRunning(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	pid := srv.PID()
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.PID() == pid {
		t.Fatal("Restart of a running server kept the old process")
	}
	if err := srv.Client(t).Ping(t.Context()).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestKillThenRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if n, err := rdb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS after Restart = %d, %v; want 0, nil", n, err)
	}
}

func TestStartN(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	ctx := t.Context()
	seen := map[string]bool{}
	for i, srv := range servers {
		if seen[srv.Addr()] {
			t.Fatalf("duplicate address %s", srv.Addr())
		}
		seen[srv.Addr()] = true
		if err := srv.Client(t).Set(ctx, "who", i, 0).Err(); err != nil {
			t.Fatalf("SET on %s: %v", srv.Addr(), err)
		}
	}
	for i, srv := range servers {
		got, err := srv.Client(t).Get(ctx, "who").Int()
		if err != nil || got != i {
			t.Fatalf("GET on server %d = %d, %v; servers are not independent", i, got, err)
		}
	}
}

func TestFlush(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := srv.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Flush = %d, %v; want 0", n, err)
	}
}

func TestSetFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "kept", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if err := srv.SetFull(ctx, true); err != nil {
		t.Fatalf("SetFull(true): %v", err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("SET on a full server = %v, want an OOM refusal", err)
	}
	if got, err := rdb.Get(ctx, "kept").Result(); err != nil || got != "v" {
		t.Fatalf("GET of a key written before = %q, %v; nothing may be evicted", got, err)
	}
	if err := srv.SetFull(ctx, false); err != nil {
		t.Fatalf("SetFull(false): %v", err)
	}
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after SetFull(false): %v", err)
	}
}

func TestPause(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	rdb := srv.Client(t)
	if err := rdb.Ping(ctx).Err(); err != nil { // open the connection before the pause
		t.Fatalf("PING: %v", err)
	}
	const pause = 300 * time.Millisecond
	if err := srv.Pause(ctx, pause); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	start := time.Now()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET during pause: %v", err)
	}
	// A loose bound on purpose: the point is that the command was held, not
	// how precisely.
	if waited := time.Since(start); waited < pause/2 {
		t.Fatalf("SET during a %v pause returned after %v; it was not held", pause, waited)
	} else {
		t.Logf("SET held for %v by a %v pause", waited, pause)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru"))
	got, err := srv.Client(t).ConfigGet(t.Context(), "maxmemory-policy").Result()
	if err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("CONFIG GET maxmemory-policy = %v, %v", got, err)
	}
}

func TestCloseRemovesDir(t *testing.T) {
	t.Parallel()
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	dir := srv.Dir()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still exists after Close (stat err %v)", dir, err)
	}
	if err := srv.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

func TestLaunchErrors(t *testing.T) {
	// Not parallel: it changes the environment.
	t.Run("missing binary", func(t *testing.T) {
		t.Setenv("REDIS_SERVER_BIN", "redistest-no-such-binary")
		_, err := redistest.Launch()
		if err == nil || !strings.Contains(err.Error(), "REDIS_SERVER_BIN") {
			t.Fatalf("Launch with a bad REDIS_SERVER_BIN: err = %v", err)
		}
	})
	t.Run("not in PATH", func(t *testing.T) {
		t.Setenv("REDIS_SERVER_BIN", "")
		t.Setenv("PATH", t.TempDir())
		_, err := redistest.Launch()
		want := `redistest: redis-server not found in PATH: run "make redis"`
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("Launch without redis-server in PATH: err = %v, want prefix %q", err, want)
		}
	})
	t.Run("bad argument shows the log", func(t *testing.T) {
		_, err := redistest.Launch(redistest.WithArgs("--no-such-option", "1"))
		if err == nil || !strings.Contains(err.Error(), "no-such-option") {
			t.Fatalf("Launch with a bad argument: err = %v, want the log tail naming the option", err)
		}
	})
}

func ExampleLaunch() {
	srv, err := redistest.Launch()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	fmt.Println(rdb.Ping(context.Background()).Val())
	// Output: PONG
}
