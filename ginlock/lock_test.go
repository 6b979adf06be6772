package ginlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

func TestAccountDeductionsAreSerialized(t *testing.T) {
	e := setup(t)
	r := router()
	var balance atomic.Int64 // read and written non-atomically below, on purpose
	balance.Store(1000)
	r.POST("/accounts/:id/deduct", ginlock.New(e.locks, accountKey, ginlock.WithWait(30*time.Second)), func(c *gin.Context) {
		// A nested lock of the same account re-enters the middleware's lock.
		nested, err := e.locks.Acquire(c.Request.Context(), "account:"+c.Param("id"))
		if err != nil {
			c.String(http.StatusInternalServerError, "nested acquire: %v", err)
			return
		}
		defer func() { _ = nested.Release(context.Background()) }()
		if lk, ok := ginlock.FromContext(c); !ok || nested.HoldCount() != 2 || lk.Token() != nested.Token() {
			c.String(http.StatusInternalServerError, "not re-entered: %d holds", nested.HoldCount())
			return
		}
		v := balance.Load()
		time.Sleep(2 * time.Millisecond)
		balance.Store(v - 10)
		c.Status(http.StatusNoContent)
	})

	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := do(r, req{path: "/accounts/7/deduct", key: fmt.Sprintf("deduct-%d", i)})
			if w.Code != http.StatusNoContent {
				t.Errorf("request %d: %d %s", i, w.Code, w.Body)
			}
		})
	}
	wg.Wait()
	if got, want := balance.Load(), int64(1000-10*n); got != want {
		t.Fatalf("balance = %d, want %d", got, want)
	}
}

// blocking registers a route whose handler holds the lock until release is closed.
func blocking(r *gin.Engine, e *env, path string, opts ...ginlock.Option) (started, release chan struct{}) {
	started, release = make(chan struct{}, 1), make(chan struct{})
	r.POST(path, ginlock.New(e.locks, accountKey, opts...), func(c *gin.Context) {
		started <- struct{}{}
		<-release
		c.Status(http.StatusOK)
	})
	return started, release
}

func TestBusy(t *testing.T) {
	e := setup(t)
	r := router()
	started, release := blocking(r, e, "/accounts/:id/withdraw")
	var ran atomic.Bool
	// Safe methods are locked too unless skipped.
	r.GET("/accounts/:id", ginlock.New(e.locks, accountKey), func(c *gin.Context) { ran.Store(true) })

	done := make(chan int)
	go func() { done <- do(r, req{path: "/accounts/3/withdraw"}).Code }()
	<-started

	w := do(r, req{path: "/accounts/3/withdraw"})
	// A per-account key: the detail speaks of a busy resource, not of an Idempotency-Key.
	if p := wantProblem(t, w, http.StatusConflict); !strings.Contains(p.Detail, "locked by another request") {
		t.Errorf("busy account: detail %q", p.Detail)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	wantProblem(t, do(r, req{method: http.MethodGet, path: "/accounts/3"}), http.StatusConflict)
	if ran.Load() {
		t.Fatal("GET handler ran while the account was locked")
	}
	if w := do(r, req{method: http.MethodGet, path: "/accounts/4"}); w.Code != http.StatusOK {
		t.Fatalf("another account: %d", w.Code)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("holder: %d", code)
	}
}

func TestWaitEndsWithTheClient(t *testing.T) {
	e := setup(t)
	r := router()
	started, release := blocking(r, e, "/accounts/:id/withdraw", ginlock.WithWait(time.Minute))
	done := make(chan int)
	go func() { done <- do(r, req{path: "/accounts/5/withdraw"}).Code }()
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	w := do(r, req{path: "/accounts/5/withdraw", ctx: ctx})
	wantProblem(t, w, http.StatusConflict)
	if d := time.Since(begin); d > 10*time.Second {
		t.Fatalf("waiter returned after %v, want soon after its client left", d)
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("holder: %d", code)
	}
	// The waiter left the line: the lock is free again.
	if w := do(r, req{path: "/accounts/5/withdraw"}); w.Code != http.StatusOK {
		t.Fatalf("after the waiter left: %d, want 200", w.Code)
	}
}

func TestPanicReleasesAndStoresNothing(t *testing.T) {
	e := setup(t)
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), auth)
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
	if w := do(r, q); w.Code != http.StatusInternalServerError {
		t.Fatalf("panic: %d, want 500", w.Code)
	}
	if keys := e.redisKeys(t, "*:done"); len(keys) != 0 {
		t.Fatalf("records after a panic: %v", keys)
	}
	if keys := locktest.Held(t, e.rdb); len(keys) != 0 {
		t.Fatalf("locks still held after a panic: %v", keys)
	}
	if w := do(r, q); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d after %d runs, want 201 after 2", w.Code, runs.Load())
	}
}

func TestLostLock(t *testing.T) {
	e := setup(t, dlock.WithLease(300*time.Millisecond))
	r := router()
	var runs atomic.Int32
	started := make(chan struct{})
	causes := make(chan error, 1)
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		if runs.Add(1) > 1 {
			c.JSON(http.StatusCreated, gin.H{"ok": true})
			return
		}
		close(started)
		ctx := c.Request.Context()
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
		case <-time.After(20 * time.Second):
			causes <- errors.New("handler context not cancelled")
		}
	})
	q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
	done := make(chan problemBody)
	go func() {
		w := do(r, q)
		if w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
			t.Errorf("lost lock: %d %s (Retry-After %q), want 409 with Retry-After", w.Code, w.Body, w.Header().Get("Retry-After"))
		}
		done <- problemBody{Status: w.Code}
	}()
	<-started
	loseLock(t, e)
	if cause := <-causes; !errors.Is(cause, dlock.ErrLockLost) {
		t.Fatalf("handler context cause %v, want dlock.ErrLockLost", cause)
	}
	<-done
	if keys := e.redisKeys(t, "*:done"); len(keys) != 0 {
		t.Fatalf("stored after a lost lock: %v", keys)
	}
	if w := do(r, q); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d after %d runs, want 201 after 2", w.Code, runs.Load())
	}
}

func TestSkipper(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey,
		ginlock.WithSkipper(func(c *gin.Context) bool { return c.GetHeader("X-Internal") == "1" })),
		func(c *gin.Context) {
			if _, ok := ginlock.FromContext(c); ok {
				t.Error("lock present on a skipped request")
			}
			c.Status(http.StatusOK)
		})
	if w := do(r, req{path: "/payments", header: map[string]string{"X-Internal": "1"}}); w.Code != http.StatusOK {
		t.Fatalf("skipped request: %d, want 200", w.Code)
	}
	wantProblem(t, do(r, req{path: "/payments"}), http.StatusBadRequest)
}

func TestRequestContextRestored(t *testing.T) {
	e := setup(t)
	r := gin.New()
	var outer context.Context
	var inner *dlock.Lock
	r.Use(func(c *gin.Context) {
		outer = c.Request.Context()
		c.Next()
		if c.Request.Context() != outer {
			t.Error("request context not restored")
		}
		if _, ok := ginlock.FromContext(c); ok {
			t.Error("lock still visible after the middleware returned")
		}
	})
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey), func(c *gin.Context) {
		inner, _ = ginlock.FromContext(c)
		c.Status(http.StatusOK)
	})
	if w := do(r, req{path: "/accounts/1"}); w.Code != http.StatusOK {
		t.Fatalf("%d", w.Code)
	}
	if inner == nil || !errors.Is(inner.Err(), dlock.ErrNotHeld) {
		t.Fatalf("lock %v after the request, want released", inner)
	}
}

func TestTTLEndsTheHandlerContext(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey, ginlock.WithTTL(200*time.Millisecond)), func(c *gin.Context) {
		select {
		case <-c.Request.Context().Done():
		case <-time.After(10 * time.Second):
			c.Status(http.StatusOK) // the lease did not end: fails the test below
		}
	})
	p := wantProblem(t, do(r, req{path: "/accounts/2"}), http.StatusConflict)
	if !strings.Contains(p.Detail, "lost") {
		t.Fatalf("detail %q, want the lost-lock explanation", p.Detail)
	}
}

// A locked request with replay, whose context can end as every server request's can, starts
// no goroutine on a go-redis client with default options: not for the acquire, not for the
// store, not for the lock's context.
func TestNoGoroutinePerRequest(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/pay", ginlock.New(e.locks, payKey), func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"ok": true}) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pay := func() {
		if w := do(r, req{path: "/pay", body: `{"amount":1}`, user: "u1", key: idemKey(t), ctx: ctx}); w.Code != http.StatusCreated {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	const requests = 100
	if n := locktest.GoroutinesStarted(requests, pay); n > requests/10 {
		t.Fatalf("%d goroutines started for %d requests, want none", n, requests)
	}
}
