package ginlock_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// The double-submit recipe on a route with a path parameter (docs/ginlock.md): a key of the
// parameter and the body hash, scoped by the user, with WithReplay. The same body to another
// account is another key and runs; the same body to the same account again is replayed.
func TestDoubleSubmitOtherAccountRuns(t *testing.T) {
	e := setup(t)
	r := router()
	submitKey := keyfunc.Join(keyfunc.Param("id"), keyfunc.BodyHash()).Scope(keyfunc.ContextValue(userKey{}).Named("user"))
	var runs atomic.Int32
	r.POST("/accounts/:id/deposit", ginlock.New(e.locks, submitKey, ginlock.WithReplay(10*time.Minute)),
		func(c *gin.Context) {
			runs.Add(1)
			c.JSON(http.StatusCreated, gin.H{"account": c.Param("id")})
		})
	body := `{"amount":100}`
	if w := do(r, req{path: "/accounts/1/deposit", user: "alice", body: body}); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w := do(r, req{path: "/accounts/2/deposit", user: "alice", body: body})
	if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" || runs.Load() != 2 {
		t.Fatalf("same body to another account: %d %s after %d runs; want the handler's own 201", w.Code, w.Body, runs.Load())
	}
	w = do(r, req{path: "/accounts/2/deposit", user: "alice", body: body})
	if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 2 {
		t.Fatalf("same body to the same account again: %d replayed=%q after %d runs; want the 201 replayed",
			w.Code, w.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}
