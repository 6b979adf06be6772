package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer collects a process's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCtrlCWithRequestQueued runs the shop command as a user does and presses Ctrl-C
// (SIGINT) while a withdrawal is queued behind an account lock held elsewhere: the shop
// answers that request 503 unavailable at once (it had done nothing), says it stopped, and
// exits 0. Before, the queued request kept waiting for its 10 s in the queue, the shutdown
// waited as long for it, and the shop often exited 1 saying requests were stopped; the
// request got a 409 that blamed another request.
func TestCtrlCWithRequestQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := filepath.Join(t.TempDir(), "shop")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	srv := redistest.Start(t)
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var out syncBuffer
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, "shop: protected on "); ok {
				urls <- rest
			}
		}
		exited <- cmd.Wait()
	}()
	waited := false // set once the test has received from exited
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	var url string
	select {
	case url = <-urls:
	case err := <-exited:
		waited = true
		t.Fatalf("the shop exited before it served: %v\n%s%s", err, out.String(), stderr.String())
	}

	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Post(url+"/api/accounts", "application/json", strings.NewReader(`{"owner":"alice","balance":10000}`))
	if err != nil {
		t.Fatal(err)
	}
	var a struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if err != nil || a.ID == "" {
		t.Fatalf("create account: %d %v", resp.StatusCode, err)
	}
	rdb := srv.Client(t)
	shoptest.HoldAccount(t, rdb, a.ID)

	type result struct {
		code int
		body string
		err  error
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := c.Post(url+"/api/accounts/"+a.ID+"/withdraw", "application/json", strings.NewReader(`{"amount":100}`))
		if err != nil {
			answered <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- result{resp.StatusCode, strings.TrimSpace(string(b)), err}
	}()
	// dlock keeps a waiter's place in line in Redis, next to the lock.
	for queued := false; !queued; {
		select {
		case err := <-exited:
			waited = true
			t.Fatalf("the shop exited: %v\n%s%s", err, out.String(), stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		keys, err := rdb.Keys(t.Context(), "*"+a.ID+"*").Result()
		queued = err == nil && len(keys) > 1
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	waited = true
	t.Logf("stdout:\n%sstderr:\n%s", out.String(), stderr.String())
	if err != nil {
		t.Errorf("the shop stopped with Ctrl-C exited with %v, want status 0", err)
	}
	if !strings.Contains(out.String(), "shop: stopped") {
		t.Errorf("the shop's output does not say it stopped:\n%s", out.String())
	}
	if r := <-answered; r.err != nil || r.code != http.StatusServiceUnavailable || r.body != `{"error":"unavailable"}` {
		t.Errorf("the queued withdrawal answered %d %s (%v), want 503 {\"error\":\"unavailable\"}", r.code, r.body, r.err)
	}
}
