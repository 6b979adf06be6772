package ginlock_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// WithReplay on a resource key (account:{id}): the lock still excludes every request on the
// account, whatever its query; replay must never narrow the lock.
func TestReplayResourceKeyExcludesAcrossQueries(t *testing.T) {
	e := setup(t)
	r := router()
	entered := make(chan struct{})
	release := make(chan struct{})
	var running, overlap atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, accountKey, ginlock.WithReplay(time.Minute)),
		func(c *gin.Context) {
			if running.Add(1) > 1 {
				overlap.Add(1)
			}
			defer running.Add(-1)
			if c.Query("amount") == "5" {
				close(entered)
				<-release
			}
			c.JSON(http.StatusCreated, gin.H{"amount": c.Query("amount")})
		})
	first := make(chan int, 1)
	go func() { first <- do(r, req{path: "/accounts/1/withdraw?amount=5", user: "alice"}).Code }()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("first withdrawal never ran")
	}
	w := do(r, req{path: "/accounts/1/withdraw?amount=7", user: "alice"})
	close(release)
	if c := <-first; c != http.StatusCreated {
		t.Fatalf("first withdrawal: %d", c)
	}
	if w.Code != http.StatusConflict || overlap.Load() != 0 {
		t.Fatalf("second withdrawal from account 1 while the first held its lock: %d %s (overlapping handlers: %d); "+
			"want 409: the account lock must exclude it", w.Code, w.Body, overlap.Load())
	}
}

// The documented caveat (doc.go): WithReplay on a resource key stores one response per
// account; a later, different request on the account gets 422.
func TestReplayResourceKeyLaterDifferentRequest422(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, accountKey, ginlock.WithReplay(time.Minute)),
		func(c *gin.Context) {
			runs.Add(1)
			c.JSON(http.StatusCreated, gin.H{"amount": c.Query("amount")})
		})
	if w := do(r, req{path: "/accounts/1/withdraw?amount=5", user: "alice"}); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w := do(r, req{path: "/accounts/1/withdraw?amount=7", user: "alice"})
	if w.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
		t.Fatalf("later, different request on the account: %d %s after %d runs; doc.go says 422", w.Code, w.Body, runs.Load())
	}
}
