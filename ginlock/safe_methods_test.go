package ginlock_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// Safe methods are not skipped by default: a GET, HEAD or OPTIONS on a locked route takes
// the lock like a POST (a balance read must not see a half-applied transfer), so it is
// answered 409 while another request holds it. A route that does not want that skips them
// with WithSkipper; a CORS preflight (OPTIONS, without the request's headers) is best
// answered before ginlock by the CORS middleware.
func TestSafeMethodsLockedUnlessSkipped(t *testing.T) {
	e := setup(t)
	held, err := e.locks.TryAcquire(context.Background(), "account:1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()

	safe := func(c *gin.Context) bool {
		switch c.Request.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return true
		}
		return false
	}
	for _, tc := range []struct {
		name   string
		opts   []ginlock.Option
		status int
	}{
		{"default", nil, http.StatusConflict},
		{"skipped", []ginlock.Option{ginlock.WithSkipper(safe)}, http.StatusOK},
	} {
		r := router()
		g := r.Group("/accounts/:id", ginlock.New(e.locks, accountKey, tc.opts...))
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
			g.Handle(m, "/balance", func(c *gin.Context) { c.Status(http.StatusOK) })
		}
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
			t.Run(tc.name+" "+m, func(t *testing.T) {
				w := do(r, req{method: m, path: "/accounts/1/balance"})
				if w.Code != tc.status {
					t.Fatalf("%s with the account locked: %d, want %d", m, w.Code, tc.status)
				}
				if tc.status == http.StatusConflict && w.Header().Get("Retry-After") == "" {
					t.Fatalf("%s: 409 without Retry-After", m)
				}
			})
		}
	}
}
