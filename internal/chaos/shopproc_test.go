//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildShop compiles the example shop command into a temporary directory and returns the
// binary's path. It is built without -race: the soak measures its memory.
func buildShop(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shop")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/lockguard/lockguard/examples/shop/cmd/shop")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build shop: %v\n%s", err, out)
	}
	return bin
}

// shopProc is the shop command running as a child process, restartable on the same
// address, Redis and database file.
type shopProc struct {
	t                   *testing.T
	bin, db, addr, rdis string
	logPath             string
	cmd                 *exec.Cmd
	done                chan struct{}
	URL                 string
}

func startShop(t *testing.T, bin, redisAddr, db, addr string) *shopProc {
	t.Helper()
	p := &shopProc{t: t, bin: bin, db: db, addr: addr, rdis: redisAddr,
		logPath: filepath.Join(t.TempDir(), "shop.log"), URL: "http://" + addr}
	p.start()
	t.Cleanup(func() { p.kill() })
	return p
}

// start runs the process and waits until /healthz answers 200.
func (p *shopProc) start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(p.bin, "-addr", p.addr, "-db", p.db)
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+p.rdis)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(p.URL + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			p.t.Fatalf("shop exited during start: %v\n%s", cmd.ProcessState, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("shop not healthy within 20s: %v\n%s", err, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *shopProc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// stop shuts the shop down as an operator would (SIGTERM), so its database is closed.
func (p *shopProc) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.t.Errorf("shop ignored SIGTERM for 15s")
	}
	p.kill()
}

// pid is the running process's id, or 0.
func (p *shopProc) pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *shopProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// shopAPI sends JSON requests to a shop.
type shopAPI struct {
	base string
	c    *http.Client
}

func newShopAPI(base string) *shopAPI {
	return &shopAPI{base: base, c: &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 256},
	}}
}

func (a *shopAPI) close() { a.c.CloseIdleConnections() }

// reply is one response, or err when none came.
type reply struct {
	status int
	body   []byte
	header http.Header
	err    error
}

// errorCode is the shop's {"error": code}, or "" for other bodies.
func (r reply) errorCode() string {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error
}

func (a *shopAPI) do(ctx context.Context, method, path string, body any, header map[string]string) reply {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := a.c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b, header: resp.Header, err: err}
}

// must sends a request that has to answer want and decodes the body into out.
func (a *shopAPI) must(t *testing.T, method, path string, body any, want int, out any) {
	t.Helper()
	r := a.do(context.Background(), method, path, body, nil)
	if r.err != nil || r.status != want {
		t.Fatalf("%s %s: status %d err %v, want %d: %s", method, path, r.status, r.err, want, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// The shop's JSON shapes, as far as the tests read them.
type (
	shopAccount struct {
		ID      string `json:"id"`
		Balance int64  `json:"balance"`
	}
	shopOrder struct {
		ID        string `json:"id"`
		AccountID string `json:"account_id"`
		Amount    int64  `json:"amount"`
		Status    string `json:"status"`
	}
	shopEntry struct {
		OrderID string `json:"order_id"`
		Kind    string `json:"kind"`
		Amount  int64  `json:"amount"`
		BasedOn int64  `json:"based_on"`
	}
)

// ledgerCheck verifies one account read through the API: its balance is the opening
// balance plus the ledger's effects, and its entries are based on versions 0, 1, 2, ...
// (a repeated version is a lost update, a gap a balance write without its entry).
// It returns the entries.
func ledgerCheck(t *testing.T, api *shopAPI, id string, opening int64) []shopEntry {
	t.Helper()
	var acc shopAccount
	api.must(t, "GET", "/api/accounts/"+id, nil, http.StatusOK, &acc)
	var entries []shopEntry
	api.must(t, "GET", "/api/accounts/"+id+"/ledger", nil, http.StatusOK, &entries)
	sum := opening
	for i, e := range entries {
		if e.Kind == "refund" {
			sum += e.Amount
		} else {
			sum -= e.Amount
		}
		if e.BasedOn != int64(i) {
			t.Errorf("account %s: entry %d (%s %s) based on version %d", id, i, e.Kind, e.OrderID, e.BasedOn)
		}
	}
	if acc.Balance != sum {
		t.Errorf("account %s: balance %d, opening plus ledger %d", id, acc.Balance, sum)
	}
	return entries
}

// procStatus reads a numeric field (kB for sizes) of /proc/<pid>/status.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}

// openFDs counts the open file descriptors of pid.
func openFDs(pid int) int {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}
