package shop_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// With Redis stalled (SIGSTOP), pay and withdraw answer 503 before go-redis's default 5 s
// read timeout could end a single call: the shop's client has the settings docs/dlock.md
// asks for (ContextTimeoutEnabled, ReadTimeout 500 ms). With go-redis's defaults each took
// about 10 s.
func TestStalledRedisAnswers503Promptly(t *testing.T) {
	srv := redistest.Start(t)
	in, err := shop.Start(t.Context(), shop.Options{
		Addr: "127.0.0.1:0", RedisAddr: srv.Addr(), DBPath: filepath.Join(t.TempDir(), "shop.db"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Close(ctx)
	})
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	t.Cleanup(c.CloseIdleConnections)

	a, o := accountWithOrder(t, c, in.URL)

	if err := syscall.Kill(srv.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := sync.OnceFunc(func() { _ = syscall.Kill(srv.PID(), syscall.SIGCONT) })
	t.Cleanup(cont) // before the shop closes (LIFO)

	var wg sync.WaitGroup
	type result struct {
		code int
		took time.Duration
	}
	var pay, withdraw result
	wg.Go(func() {
		start := time.Now()
		code, _ := rawPost(t, c, in.URL+"/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k1")
		pay = result{code, time.Since(start)}
	})
	wg.Go(func() {
		start := time.Now()
		code, _ := rawPost(t, c, in.URL+"/api/accounts/"+a.ID+"/withdraw", `{"amount":100}`)
		withdraw = result{code, time.Since(start)}
	})
	wg.Wait()
	cont()
	t.Logf("Redis stalled: pay %d after %v, withdraw %d after %v", pay.code, pay.took.Round(10*time.Millisecond), withdraw.code, withdraw.took.Round(10*time.Millisecond))
	for name, r := range map[string]result{"pay": pay, "withdraw": withdraw} {
		if r.code != http.StatusServiceUnavailable || r.took >= 5*time.Second {
			t.Errorf("%s with Redis stalled: %d after %v, want 503 before a default read timeout (5 s) could end one call", name, r.code, r.took.Round(10*time.Millisecond))
		}
	}
}
