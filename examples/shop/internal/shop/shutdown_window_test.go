package shop_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

// A shutdown's StopWaiting that lands while a pay is between its two locks (its
// idempotency lock held, the account lock's key function about to read the order's account
// from the database) stops a request that has done nothing yet, like one queued for the
// account lock: it should answer 503 unavailable with Retry-After: 1. The hook placed between
// the two lock middlewares stands for the shutdown arriving at that moment.
func TestStopBetweenPayLocksAnswers503(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int // where in the pay's lock middlewares the shutdown arrives
	}{
		{"before the idempotency lock", 0},
		{"between the idempotency and the account lock", 1},
		{"once the account lock is held", 2},
	} {
		t.Run(tc.name, func(t *testing.T) { stopPayAt(t, tc.at) })
	}
}

func stopPayAt(t *testing.T, at int) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	store, err := shop.OpenStore(t.Context(), filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	locks := dlock.New(rdb)
	t.Cleanup(func() { _ = locks.Close() })
	p := shop.Protect(locks, store, nil)
	if len(p.Pay) != 2 {
		t.Fatalf("pay has %d lock middlewares, the test expects 2 (idempotency, account)", len(p.Pay))
	}
	var app *shop.App
	var stopping bool
	shutdownArrives := func(c *gin.Context) {
		if stopping {
			app.StopWaiting()
		}
		c.Next()
	}
	p.Pay = append(append(append([]gin.HandlerFunc{}, p.Pay[:at]...), shutdownArrives), p.Pay[at:]...)
	app = shop.NewApp(shop.Config{Store: store, Redis: rdb, Protection: p,
		Provider: shop.Provider{Min: time.Millisecond, Max: time.Millisecond}})
	if err := app.StartWorker(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	e := &env{t: t, h: app.Handler(), store: store}
	o := e.order(e.account("alice", 10_000).ID, 100)

	stopping = true
	w := e.do("POST", "/api/orders/"+o.ID+"/pay", "", "Idempotency-Key", "k-stop")
	t.Logf("the stopped pay answered %d %s (Retry-After %q)", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Retry-After"))
	if w.Code != http.StatusServiceUnavailable || strings.TrimSpace(w.Body.String()) != `{"error":"unavailable"}` || w.Header().Get("Retry-After") != "1" {
		t.Errorf("pay stopped by the shutdown before it queued for the account lock: %d %s, want 503 {\"error\":\"unavailable\"} with Retry-After 1",
			w.Code, w.Body)
	}
}
