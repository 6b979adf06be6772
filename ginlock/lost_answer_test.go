package ginlock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

// A handler that made the payment and answered 201 + Location without a body (c.Status)
// before the loss of its lock was noticed has answered: that answer stands. A 409 saying the
// request did not complete and may be retried would invite a second payment.
func TestLostLockKeepsBodilessAnswer(t *testing.T) {
	e := setup(t, dlock.WithLease(300*time.Millisecond))
	r := router()
	answered := make(chan struct{})
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		// the payment is made here, then the handler answers:
		c.Header("Location", "/payments/42")
		c.Status(http.StatusCreated)
		close(answered)
		<-c.Request.Context().Done() // finishing touches outlast the lease; the loss is noticed
	})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- do(r, req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}) }()
	<-answered
	loseLock(t, e)
	w := <-done
	if w.Code != http.StatusCreated || w.Header().Get("Location") != "/payments/42" {
		t.Fatalf("handler answered 201 + Location before the loss was noticed; client got %d %s (Retry-After %q)",
			w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

// A handler that set headers for its answer (Content-Type, Location), then found its lock
// lost and returned without writing, did not answer: ginlock's 409 goes out as problem+json,
// without the handler's headers, with those set before ginlock.
func TestLostLock409DropsHandlersHeaders(t *testing.T) {
	e := setup(t, dlock.WithLease(300*time.Millisecond))
	r := router()
	r.Use(func(c *gin.Context) { c.Header("X-Request-Id", "r1"); c.Next() })
	started := make(chan struct{})
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		c.Header("Content-Type", "application/json")
		c.Header("Location", "/payments/42")
		close(started)
		<-c.Request.Context().Done() // the lock is lost; nothing written
	})
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- do(r, req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}) }()
	<-started
	loseLock(t, e)
	w := <-done
	h := w.Header()
	if w.Code != http.StatusConflict || h.Get("Content-Type") != ginlock.ProblemContentType || h.Get("Location") != "" ||
		h.Get("X-Request-Id") != "r1" || h.Get("Retry-After") == "" {
		t.Fatalf("lost lock, nothing written: %d %v %s; want a problem+json 409 with Retry-After and X-Request-Id, without Location",
			w.Code, h, w.Body)
	}
}

// loseLock deletes the one lock held in Redis, as a failover or an expired lease would.
func loseLock(t *testing.T, e *env) {
	t.Helper()
	keys := locktest.Held(t, e.rdb)
	if len(keys) != 1 {
		t.Fatalf("lock keys %v, want one", keys)
	}
	if err := e.rdb.Del(context.Background(), keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
}
