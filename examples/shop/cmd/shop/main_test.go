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

// shopProcess is the shop command running as a user starts it, with its output collected.
type shopProcess struct {
	cmd      *exec.Cmd
	out      syncBuffer // stdout
	stderr   syncBuffer
	exited   chan error // cmd.Wait's result, once stdout is read to its end
	url, db  string     // from the banner
	finished bool       // the test has received from exited
}

// startShop builds the shop command, runs it with env added to its environment, and waits
// for its banner. The process is killed at the end of the test if it is still running.
func startShop(t *testing.T, env ...string) *shopProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shop")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := &shopProcess{cmd: exec.Command(bin, "-addr", "127.0.0.1:0"), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.out.Write([]byte(line + "\n"))
			if rest, ok := strings.CutPrefix(line, "shop: protected on "); ok {
				p.url = rest
			}
			if rest, ok := strings.CutPrefix(line, "  db     "); ok {
				p.db = rest
				close(ready) // the banner's last line but one
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.finished {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case <-ready:
	case err := <-p.exited:
		p.finished = true
		t.Fatalf("the shop exited before it served: %v\n%s%s", err, p.out.String(), p.stderr.String())
	}
	return p
}

// wait waits for the shop to exit and returns cmd.Wait's result.
func (p *shopProcess) wait() error {
	err := <-p.exited
	p.finished = true
	return err
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
	srv := redistest.Start(t)
	p := startShop(t, "REDIS_ADDR="+srv.Addr())
	url := p.url
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
		case err := <-p.exited:
			p.finished = true
			t.Fatalf("the shop exited: %v\n%s%s", err, p.out.String(), p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		keys, err := rdb.Keys(t.Context(), "*"+a.ID+"*").Result()
		queued = err == nil && len(keys) > 1
	}

	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = p.wait()
	t.Logf("stdout:\n%sstderr:\n%s", p.out.String(), p.stderr.String())
	if err != nil {
		t.Errorf("the shop stopped with Ctrl-C exited with %v, want status 0", err)
	}
	if !strings.Contains(p.out.String(), "shop: stopped") {
		t.Errorf("the shop's output does not say it stopped:\n%s", p.out.String())
	}
	if r := <-answered; r.err != nil || r.code != http.StatusServiceUnavailable || r.body != `{"error":"unavailable"}` {
		t.Errorf("the queued withdrawal answered %d %s (%v), want 503 {\"error\":\"unavailable\"}", r.code, r.body, r.err)
	}
}

// One Ctrl-C can reach the shop twice: GNU timeout, and a terminal's job control, signal the
// process and its process group. A repeat within a second of the first is the same Ctrl-C:
// the shop still shuts down cleanly, exits 0 and removes its temporary files. Before, a
// repeat that came while the shutdown ran (here: the worker giving a refund that waits for
// a busy account its 5 s) killed it at once, leaving its temporary database behind.
func TestCtrlCDeliveredTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	srv := redistest.Start(t)
	p := startShop(t, "REDIS_ADDR="+srv.Addr()) // the database is a temporary file
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	call := func(path, idemKey, body string, want int) map[string]any {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, p.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if idemKey != "" {
			req.Header.Set("Idempotency-Key", idemKey)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != want {
			t.Fatalf("POST %s: %d %v (%v), want %d", path, resp.StatusCode, v, err, want)
		}
		return v
	}
	account, _ := call("/api/accounts", "", `{"owner":"alice","balance":10000}`, http.StatusCreated)["id"].(string)
	order, _ := call("/api/orders", "", `{"account_id":"`+account+`","amount":2500}`, http.StatusCreated)["id"].(string)
	call("/api/orders/"+order+"/pay", "pay-1", "", http.StatusOK)
	rdb := srv.Client(t)
	shoptest.HoldAccount(t, rdb, account)
	call("/api/orders/"+order+"/refund", "", "", http.StatusAccepted)
	// The refund task queues for the account lock: dlock keeps its place in line in Redis.
	for queued := false; !queued; time.Sleep(10 * time.Millisecond) {
		keys, err := rdb.Keys(t.Context(), "*account:"+account+"*").Result()
		queued = err == nil && len(keys) > 1
	}

	for range 2 {
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the second comes while the shutdown runs
	}
	err := p.wait()
	t.Logf("stdout:\n%sstderr:\n%s", p.out.String(), p.stderr.String())
	if err != nil {
		t.Errorf("the shop given Ctrl-C twice at once exited with %v, want status 0", err)
	}
	if !strings.Contains(p.out.String(), "shop: stopped") {
		t.Errorf("the shop's output does not say it stopped:\n%s", p.out.String())
	}
	if _, err := os.Stat(filepath.Dir(p.db)); !os.IsNotExist(err) {
		t.Errorf("the shop's temporary directory %s is still there (%v)", filepath.Dir(p.db), err)
	}
}
