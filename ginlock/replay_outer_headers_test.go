package ginlock_test

import (
	"net/http"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// A session middleware placed before ginlock refreshes the caller's session cookie on every
// request (sliding expiry, token rotation) and sets a request id. The route lists Set-Cookie
// and X-Request-Id in WithReplayHeaders so that the receipt cookie the handler sets is
// replayed. The stored response is what the chain after ginlock wrote: the retry keeps its
// own session cookie and request id, beside the replayed receipt. Before, the first
// request's were stored and replayed over the retry's own.
func TestReplayKeepsOuterHeaders(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.Use(func(c *gin.Context) { // session middleware, before ginlock
		http.SetCookie(c.Writer, &http.Cookie{Name: "sess", Value: c.GetHeader("X-Sess")})
		c.Header("X-Request-Id", "req-"+c.GetHeader("X-Sess"))
		c.Next()
	})
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("Content-Type", "Location", "Set-Cookie", "X-Request-Id")),
		func(c *gin.Context) {
			runs.Add(1)
			c.SetCookie("receipt", "r1", 0, "/", "", false, false)
			c.Header("Location", "/payments/1")
			c.JSON(http.StatusCreated, gin.H{"id": 1})
		})
	key := idemKey(t)
	first := do(r, req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key, header: map[string]string{"X-Sess": "s1"}})
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d", first.Code)
	}
	retry := do(r, req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key, header: map[string]string{"X-Sess": "s2"}})
	if retry.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("retry: replayed %q after %d runs, want a replay after 1", retry.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
	cookies := retry.Header().Values("Set-Cookie")
	if !slices.Contains(cookies, "sess=s2") || slices.Contains(cookies, "sess=s1") {
		t.Fatalf("replay Set-Cookie = %q: want the retry's own session cookie sess=s2 (set before ginlock for this request), not the first request's sess=s1", cookies)
	}
	if !slices.Contains(cookies, "receipt=r1; Path=/") {
		t.Fatalf("replay Set-Cookie = %q: want the handler's receipt cookie replayed", cookies)
	}
	if id := retry.Header().Values("X-Request-Id"); !slices.Equal(id, []string{"req-s2"}) {
		t.Fatalf("replay X-Request-Id = %q, want the retry's own [req-s2]", id)
	}
	if loc := retry.Header().Get("Location"); loc != "/payments/1" {
		t.Fatalf("replay Location = %q, want the stored /payments/1", loc)
	}
}
