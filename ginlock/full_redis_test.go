package ginlock_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// setFull makes the test's Redis (noeviction, its default) refuse every write that may grow
// memory, or gives it room again.
func setFull(t *testing.T, e *env, full bool) {
	t.Helper()
	if err := e.srv.SetFull(context.Background(), full); err != nil {
		t.Fatal(err)
	}
}

// A payment that finishes while Redis is full keeps its stored answer: the retry is
// replayed, also while Redis is still full, and the handler runs once. New keys get 503.
// Before, storing the answer was refused with OOM: the lock stayed held to its lease end
// and then the retry charged again.
func TestFullRedisPaymentStoredAndReplayed(t *testing.T) {
	e := setup(t)
	var runs atomic.Int32
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		n := runs.Add(1)
		if n == 1 {
			setFull(t, e, true) // the rest of the application fills Redis while this charges
		}
		c.JSON(http.StatusCreated, gin.H{"charge": n})
	})
	key := idemKey(t)
	first := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	retry := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	if retry.Code != http.StatusCreated || retry.Body.String() != first.Body.String() || retry.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("retry while Redis is full: %d %s (replayed %q), want the stored 201 %s", retry.Code, retry.Body,
			retry.Header().Get(ginlock.ReplayedHeader), first.Body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the payment handler ran %d times", n)
	}
	if w := do(r, req{path: "/payments", user: "alice", key: idemKey(t), body: `{"amount":100}`}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a new payment while Redis is full: %d, want 503 (locking stops)", w.Code)
	}
}

// With fail-open and a wait, a duplicate of a payment that is still running gets 409 while
// Redis is full: Redis answered that the lock is held, it only could not queue the duplicate.
// Before, the refused queueing was a store error, and fail-open ran the payment twice at once.
func TestFullRedisFailOpenWaitKeepsDuplicateOut(t *testing.T) {
	e := setup(t)
	var runs atomic.Int32
	entered, gate := make(chan struct{}), make(chan struct{})
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithFailOpen(), ginlock.WithWait(300*time.Millisecond)),
		func(c *gin.Context) {
			if runs.Add(1) == 1 {
				close(entered)
				<-gate
			}
			c.Status(http.StatusCreated)
		})
	key := idemKey(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	}()
	<-entered
	setFull(t, e, true)
	dup := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	setFull(t, e, false)
	close(gate)
	wg.Wait()
	if dup.Code != http.StatusConflict || runs.Load() != 1 {
		t.Fatalf("duplicate while the payment runs and Redis is full: %d, handler runs %d; want 409 and 1", dup.Code, runs.Load())
	}
}
