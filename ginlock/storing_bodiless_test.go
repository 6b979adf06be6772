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
			client := newHangUp(t)
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				runs.Add(1)  // the money moves here
				client.now() // the client times out and hangs up while the payment is made
				tc.respond(c)
			})
			key := strings.ReplaceAll(idemKey(t), ",", "")
			first := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`, ctx: client.ctx})
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

// errAfterCtx is a body source (an upstream response body read with the request's context)
// that fails once the request's context has ended, before its first byte.
type errAfterCtx struct{ ctx context.Context }

func (r errAfterCtx) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// A stream with a status of its own (c.DataFromReader(201, -1, ...), the body of unknown
// length) that stops before its first byte because the client went away is a stream cut
// short, not a bodiless answer: it is not stored, and the retry runs the handler again.
func TestStreamCutBeforeFirstByteNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	client := newHangUp(t)
	r.POST("/exports-cut", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		client.now()
		ctx := c.Request.Context()
		if ctx.Err() == nil {
			c.DataFromReader(http.StatusCreated, -1, "application/json", strings.NewReader(`{"export":"done"}`), nil)
			return
		}
		c.DataFromReader(http.StatusCreated, -1, "application/json", errAfterCtx{ctx}, nil)
	})
	key := strings.ReplaceAll(idemKey(t), ",", "")
	first := do(r, req{path: "/exports-cut", user: "alice", key: key, body: `{"n":1}`, ctx: client.ctx})
	t.Logf("first (client gone, stream failed before its first byte): %d %q", first.Code, first.Body)
	retry := do(r, req{path: "/exports-cut", user: "alice", key: key, body: `{"n":1}`})
	if retry.Header().Get(ginlock.ReplayedHeader) == "true" && retry.Body.Len() == 0 {
		t.Fatalf("retry got the cut stream's empty %d replayed (handler runs %d); want the handler run again for its body",
			retry.Code, runs.Load())
	}
	if retry.Body.String() != `{"export":"done"}` {
		t.Fatalf("retry: %d %q replayed=%q, want the export body", retry.Code, retry.Body, retry.Header().Get(ginlock.ReplayedHeader))
	}
}
