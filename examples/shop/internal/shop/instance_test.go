package shop_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestStartEmbedded: with no Redis and no database given, Start runs its own redis-server
// and SQLite file, and Close removes both.
func TestStartEmbedded(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Protected() {
		t.Error("the embedded default is not protected")
	}
	resp, err := http.Get(in.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(in.DBPath); !os.IsNotExist(err) {
		t.Errorf("database file %s still there after Close: %v", in.DBPath, err)
	}
	if c, err := net.DialTimeout("tcp", in.RedisAddr, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("redis-server at %s still accepts connections after Close", in.RedisAddr)
	}
}

// TestStartUnprotected: -unprotected serves without locks, and says so on /healthz.
func TestStartUnprotected(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0", Unprotected: true, DBPath: t.TempDir() + "/shop.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close(context.Background()) }()
	if in.Protected() {
		t.Error("Unprotected instance reports protected")
	}
}

// TestStartRefusesEvictingRedis: a Redis that evicts keys when full would drop locks, stored
// answers and queued refunds; the shop refuses to start on it and leaves nothing running.
func TestStartRefusesEvictingRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"))
	in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0", RedisAddr: srv.Addr(),
		DBPath: filepath.Join(t.TempDir(), "shop.db")})
	if in != nil {
		_ = in.Close(context.Background())
	}
	if !errors.Is(err, dlock.ErrUnsafeStore) || !strings.Contains(err.Error(), "volatile-lru") {
		t.Fatalf("Start on an evicting Redis = %v, want ErrUnsafeStore naming the policy", err)
	}
	// With noeviction, the same limit is fine.
	if err := srv.Client(t).ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	in, err = shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0", RedisAddr: srv.Addr(),
		DBPath: filepath.Join(t.TempDir(), "shop.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Failed reports the HTTP server stopping on its own, not the Close that stops it.
func TestFailedQuietAfterClose(t *testing.T) {
	in, err := shop.Start(t.Context(), shop.Options{
		Addr: "127.0.0.1:0", RedisAddr: redistest.Start(t).Addr(),
		DBPath: filepath.Join(t.TempDir(), "shop.db"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-in.Failed():
		t.Errorf("Failed() delivered %v after Close", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestRestartOnSameDB: with a database file and no Redis given, the shop's own redis-server
// keeps its data beside the database, so a restart on the same file still replays a stored
// pay answer and still runs a refund it had accepted (202) but not yet run: the worker was
// waiting for the account's lock, held elsewhere, when the shop shut down.
func TestRestartOnSameDB(t *testing.T) {
	db := filepath.Join(t.TempDir(), "shop.db")
	start := func() *shop.Instance {
		in, err := shop.Start(t.Context(), shop.Options{Addr: "127.0.0.1:0", DBPath: db})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = in.Close(context.Background()) })
		return in
	}
	in := start()
	var a shop.Account
	call(t, http.StatusCreated, &a, "POST", in.URL+"/api/accounts", `{"owner":"alice","balance":10000}`)
	var o shop.Order
	call(t, http.StatusCreated, &o, "POST", in.URL+"/api/orders", `{"account_id":"`+a.ID+`","amount":2500}`)
	paid := call(t, http.StatusOK, nil, "POST", in.URL+"/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k1")

	// Another client holds the account for a while (its lease outlives the restart).
	rdb := redis.NewClient(&redis.Options{Addr: in.RedisAddr})
	locks := dlock.New(rdb)
	if _, err := locks.Acquire(t.Context(), "account:"+a.ID, dlock.WithTTL(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	call(t, http.StatusAccepted, nil, "POST", in.URL+"/api/orders/"+o.ID+"/refund", "")
	eventually(t, 5*time.Second, "the refund task waiting for the account", func() bool {
		var q map[string]int
		call(t, http.StatusOK, &q, "GET", in.URL+"/api/queue", "")
		return q["active"] == 1
	})
	_ = locks.Close()
	_ = rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}

	again := start()
	replay := call(t, http.StatusOK, nil, "POST", again.URL+"/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k1")
	if replay.body != paid.body || !replay.replayed {
		t.Errorf("pay retried after the restart: %s (replayed %v), want the stored %s replayed", replay.body, replay.replayed, paid.body)
	}
	eventually(t, 20*time.Second, "the accepted refund applied after the restart", func() bool {
		var got shop.Order
		call(t, http.StatusOK, &got, "GET", again.URL+"/api/orders/"+o.ID, "")
		return got.Status == shop.StatusRefunded
	})
	var acc shop.Account
	call(t, http.StatusOK, &acc, "GET", again.URL+"/api/accounts/"+a.ID, "")
	if acc.Balance != 10_000 {
		t.Errorf("balance after the refund: %d, want 10000", acc.Balance)
	}
}

type answer struct {
	body     string
	replayed bool
}

// call sends a request with header pairs, checks its status and decodes a JSON answer into
// out (when not nil).
func call(t *testing.T, want int, out any, method, url, body string, header ...string) answer {
	t.Helper()
	r, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, url, b, err)
		}
	}
	return answer{body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// TestCloseStopsRequestsStillRunning: a request still running when Close's context ends (a
// pay in a long provider call, holding the account lock) is stopped before Close closes the
// lock client, Redis and the database under it: it answers, and its account lock is released
// in Redis. Before, Close went on closing while the handler ran: closing the lock client
// ended the lock (the pay answered 409 lock_lost, as if another request had taken over), its
// release failed on the closed client, and the lock stayed held in a shared Redis until its
// lease ran out.
func TestCloseStopsRequestsStillRunning(t *testing.T) {
	srv := redistest.Start(t)
	in, err := shop.Start(t.Context(), shop.Options{
		Addr: "127.0.0.1:0", RedisAddr: srv.Addr(), DBPath: filepath.Join(t.TempDir(), "shop.db"),
		Provider: shop.Provider{Min: 20 * time.Second, Max: 20 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	a, o := accountWithOrder(t, c, in.URL)

	type result struct {
		code int
		body string
		err  error
	}
	paid := make(chan result, 1)
	go func() {
		req, err := http.NewRequest("POST", in.URL+"/api/orders/"+o.ID+"/pay", nil)
		if err != nil {
			paid <- result{err: err}
			return
		}
		req.Header.Set("Idempotency-Key", "k-close")
		resp, err := c.Do(req)
		if err != nil {
			paid <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		paid <- result{resp.StatusCode, strings.TrimSpace(string(b)), err}
	}()
	locks := dlock.New(srv.Client(t))
	t.Cleanup(func() { _ = locks.Close() })
	eventually(t, 5*time.Second, "the pay to hold the account lock", func() bool {
		l, err := locks.TryAcquire(t.Context(), "account:"+a.ID)
		if err == nil {
			_ = l.Release(t.Context())
		}
		return errors.Is(err, dlock.ErrNotObtained)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = in.Close(ctx)
	t.Logf("Close with a pay still running: %v", err)
	answered := false
	select { // the client may take a moment to read an answer the server has finished
	case r := <-paid:
		answered = true
		t.Logf("the pay answered %d %s (%v)", r.code, r.body, r.err)
	case <-time.After(2 * time.Second):
		t.Error("the pay is still running 2 s after Close returned")
	}
	l, err := locks.TryAcquire(t.Context(), "account:"+a.ID)
	if err != nil {
		t.Errorf("account lock after Close: %v, want it released", err)
	} else {
		_ = l.Release(t.Context())
	}
	if !answered { // let the handler end before goleak looks
		<-paid
	}
}
