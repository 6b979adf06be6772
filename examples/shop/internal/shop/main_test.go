package shop_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/examples/shop/internal/shop"
	"github.com/lockguard/lockguard/internal/redistest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// modes runs f once for the unprotected and once for the protected shop: the HTTP
// contract is the same in both.
func modes(t *testing.T, f func(t *testing.T, protected bool)) {
	for _, protected := range []bool{false, true} {
		name := "unprotected"
		if protected {
			name = "protected"
		}
		t.Run(name, func(t *testing.T) { f(t, protected) })
	}
}

// env is one test's shop: its own Redis, SQLite file and running worker, served in memory.
type env struct {
	t     *testing.T
	h     http.Handler
	store *shop.Store
}

// newEnv starts a shop whose provider takes latency per call.
func newEnv(t *testing.T, protected bool, latency time.Duration) *env {
	t.Helper()
	return newEnvOn(t, redistest.Start(t), protected, latency)
}

// newEnvOn is newEnv on the redis-server srv (a test may stop or restart it); opts
// configure the dlock client of a protected shop.
func newEnvOn(t *testing.T, srv *redistest.Server, protected bool, latency time.Duration, opts ...dlock.Option) *env {
	t.Helper()
	rdb := srv.Client(t)
	store, err := shop.OpenStore(t.Context(), filepath.Join(t.TempDir(), "shop.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var p shop.Protection
	if protected {
		locks := dlock.New(rdb, opts...)
		t.Cleanup(func() { _ = locks.Close() })
		p = shop.Protect(locks, store, nil)
	}
	app := shop.NewApp(shop.Config{
		Store: store, Redis: rdb, Protection: p,
		Provider: shop.Provider{Min: latency, Max: latency},
	})
	if err := app.StartWorker(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() }) // before the store and Redis close (LIFO)
	return &env{t: t, h: app.Handler(), store: store}
}

// do serves one request; header is name, value pairs.
func (e *env) do(method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(context.Background(), method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

// must serves a request that has to answer want, and decodes its body into out.
func (e *env) must(want int, out any, method, path, body string, header ...string) {
	e.t.Helper()
	w := e.do(method, path, body, header...)
	if w.Code != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, w.Code, want, w.Body)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, w.Body)
		}
	}
}

func (e *env) account(owner string, balance int64) shop.Account {
	e.t.Helper()
	var a shop.Account
	e.must(http.StatusCreated, &a, "POST", "/api/accounts", jsonOf(e.t, map[string]any{"owner": owner, "balance": balance}))
	return a
}

func (e *env) order(accountID string, amount int64) shop.Order {
	e.t.Helper()
	var o shop.Order
	e.must(http.StatusCreated, &o, "POST", "/api/orders", jsonOf(e.t, map[string]any{"account_id": accountID, "amount": amount}))
	return o
}

func (e *env) ledger(accountID string) []shop.Entry {
	e.t.Helper()
	var l []shop.Entry
	e.must(http.StatusOK, &l, "GET", "/api/accounts/"+accountID+"/ledger", "")
	return l
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventually polls cond every 10 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		case <-tick.C:
		}
	}
}
