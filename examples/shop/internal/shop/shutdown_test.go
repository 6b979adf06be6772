package shop_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/examples/shop/internal/shoptest"
	"github.com/lockguard/lockguard/internal/redistest"
)

// TestCloseStopsQueuedRequestsAtOnce: a withdrawal queued for an account lock held elsewhere
// has done nothing yet, so Close stops its wait as soon as the shutdown begins: it answers 503
// unavailable with Retry-After (retry later, elsewhere or after the restart), and Close
// returns no error. Before, Close let it wait out its 10 s in the queue (as long as the
// shutdown wait itself): the client got a 409 that blamed another request, and a Ctrl-C of
// the shop often ran into the end of its shutdown wait and exited 1 saying requests had been
// stopped.
func TestCloseStopsQueuedRequestsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	in, err := shop.Start(t.Context(), shop.Options{
		Addr: "127.0.0.1:0", RedisAddr: srv.Addr(), DBPath: filepath.Join(t.TempDir(), "shop.db"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(context.Background()) })
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	var a shop.Account
	if code, body := rawPost(t, c, in.URL+"/api/accounts", `{"owner":"alice","balance":10000}`); code != http.StatusCreated || json.Unmarshal([]byte(body), &a) != nil {
		t.Fatalf("create account: %d %s", code, body)
	}

	// Another client holds the account for longer than the route waits.
	rdb := srv.Client(t)
	shoptest.HoldAccount(t, rdb, a.ID)

	type result struct {
		code       int
		body       string
		retryAfter string
		err        error
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := c.Post(in.URL+"/api/accounts/"+a.ID+"/withdraw", "application/json", strings.NewReader(`{"amount":100}`))
		if err != nil {
			answered <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answered <- result{resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Retry-After"), err}
	}()
	// dlock keeps a waiter's place in line in Redis, next to the lock: a second key of the
	// account means the withdrawal is queued.
	eventually(t, 5*time.Second, "the withdrawal to queue for the account", func() bool {
		keys, err := rdb.Keys(t.Context(), "*"+a.ID+"*").Result()
		return err == nil && len(keys) > 1
	})

	if err := in.Close(context.Background()); err != nil {
		t.Errorf("Close with a request queued for a lock: %v, want nil", err)
	}
	r := <-answered
	t.Logf("the queued withdrawal answered %d %s (Retry-After %q, %v)", r.code, r.body, r.retryAfter, r.err)
	if r.err != nil || r.code != http.StatusServiceUnavailable || r.body != `{"error":"unavailable"}` || r.retryAfter != "1" {
		t.Errorf("a withdrawal queued when the shop shut down answered %d %s (Retry-After %q, %v), want 503 {\"error\":\"unavailable\"} with Retry-After 1",
			r.code, r.body, r.retryAfter, r.err)
	}
	// It wrote nothing.
	store, err := shop.OpenStore(t.Context(), in.DBPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if got, err := store.Account(t.Context(), a.ID); err != nil || got.Balance != 10_000 {
		t.Errorf("balance after the stopped withdrawal: %+v (%v), want 10000", got, err)
	}
}
