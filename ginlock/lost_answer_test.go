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
	keys := locktest.Held(t, e.rdb)
	if len(keys) != 1 {
		t.Fatalf("lock keys %v, want one", keys)
	}
	if err := e.rdb.Del(context.Background(), keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	w := <-done
	if w.Code != http.StatusCreated || w.Header().Get("Location") != "/payments/42" {
		t.Fatalf("handler answered 201 + Location before the loss was noticed; client got %d %s (Retry-After %q)",
			w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}
