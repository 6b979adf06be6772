package ginlock_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// A payment handler that answers without a body (201 + Location, a 303 after a POST, a
// 204) must have that answer stored even when the client hung up while the handler ran: a
// response of zero bytes is complete (no stream can have been cut short). If it
// were not stored, the client's retry would run the handler, and the payment, a second time.
func TestBodilessAnswerStoredAfterClientGone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		respond func(c *gin.Context)
		status  int
	}{
		{"201 with Location, no body", func(c *gin.Context) {
			c.Header("Location", "/payments/42")
			c.Status(http.StatusCreated)
		}, http.StatusCreated},
		{"303 See Other after POST", func(c *gin.Context) {
			c.Redirect(http.StatusSeeOther, "/payments/42")
		}, http.StatusSeeOther},
		{"204 No Content", func(c *gin.Context) {
			c.Status(http.StatusNoContent)
		}, http.StatusNoContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			var runs atomic.Int32
			hangUp := make(chan context.CancelFunc, 1)
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				runs.Add(1) // the money moves here
				select {
				case cancel := <-hangUp:
					cancel() // the client times out and hangs up while the payment is made
				default:
				}
				tc.respond(c)
			})
			key := strings.ReplaceAll(idemKey(t), ",", "")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hangUp <- cancel
			first := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`, ctx: ctx})
			if first.Code != tc.status {
				t.Fatalf("first: %d %s, want %d", first.Code, first.Body, tc.status)
			}
			retry := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
			if runs.Load() != 1 || retry.Code != tc.status || retry.Header().Get(ginlock.ReplayedHeader) != "true" {
				t.Fatalf("retry after the client hung up: %d replayed=%q after %d handler runs; "+
					"want the stored %d replayed and the handler run once", retry.Code,
					retry.Header().Get(ginlock.ReplayedHeader), runs.Load(), tc.status)
			}
		})
	}
}
