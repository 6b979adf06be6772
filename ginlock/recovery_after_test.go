package ginlock_test

import (
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

// gin's Recovery placed after ginlock (in a route's or group's chain) catches the panic
// before ginlock sees it: the chain returns, and Recovery asks for a 500 that cannot go out
// once the response started. ginlock takes that late 5xx for what it is, a chain that failed
// part-way through its answer, and stores the answer only when it is known whole, as with
// Recovery before it (TestAnswerBeforePanicIsStored): a body cut by the panic is never
// replayed as the whole answer. A handler that reports a failure part-way through its body
// with a 500 (AbortWithStatusJSON after the rows it streamed) is judged the same way.
func TestRecoveryAfterGinlockPanicAfterAnswer(t *testing.T) {
	receipt := []byte(`{"charge":1}`)
	for _, tc := range []struct {
		name     string
		recovery gin.HandlerFunc
		respond  func(c *gin.Context, first bool)
		first    string // the body the client gets on the first request
		replayed bool
	}{
		{"two writes with the panic between them", gin.RecoveryWithWriter(io.Discard), func(c *gin.Context, first bool) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString(`{"charge":`)
			if first {
				panic("part-way through the answer")
			}
			_, _ = c.Writer.WriteString(`1}`)
		}, `{"charge":`, false},
		{"a recovery rendering its own body", gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "internal"})
		}), func(c *gin.Context, first bool) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString(`{"charge":`)
			if first {
				panic("part-way through the answer")
			}
			_, _ = c.Writer.WriteString(`1}`)
		}, `{"charge":{"error":"internal"}`, false},
		{"c.JSON then a panic", gin.RecoveryWithWriter(io.Discard), func(c *gin.Context, first bool) {
			c.JSON(http.StatusCreated, gin.H{"charge": 1})
			if first {
				panic("after the answer")
			}
		}, string(receipt), false},
		{"body with its Content-Length then a panic", gin.RecoveryWithWriter(io.Discard), func(c *gin.Context, first bool) {
			c.Header("Content-Length", strconv.Itoa(len(receipt)))
			c.Data(http.StatusCreated, "application/json", receipt)
			if first {
				panic("after the answer")
			}
		}, string(receipt), true},
		{"201 without a body then a panic", gin.RecoveryWithWriter(io.Discard), func(c *gin.Context, first bool) {
			c.Header("Location", "/payments/1")
			c.Status(http.StatusCreated)
			c.Writer.WriteHeaderNow()
			if first {
				panic("after the answer")
			}
		}, "", true},
		{"an error rendered as 500 after the body started without a panic", func(c *gin.Context) { c.Next() }, func(c *gin.Context, first bool) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString(`{"charge":`)
			if first { // the rest of the answer failed: the handler reports it the usual way
				c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "internal"})
				return
			}
			_, _ = c.Writer.WriteString(`1}`)
		}, `{"charge":{"error":"internal"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			var runs atomic.Int32
			r.POST("/payments", ginlock.New(e.locks, payKey), tc.recovery, func(c *gin.Context) {
				tc.respond(c, runs.Add(1) == 1)
			})
			q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
			if w := do(r, q); w.Code != http.StatusCreated || w.Body.String() != tc.first {
				t.Fatalf("first: %d %q, want 201 %q", w.Code, w.Body, tc.first)
			}
			if keys := locktest.Held(t, e.rdb); len(keys) != 0 {
				t.Fatalf("locks still held after a panic: %v", keys)
			}
			w := do(r, q)
			replayed := w.Header().Get(ginlock.ReplayedHeader) == "true"
			want, wantRuns := string(receipt), int32(2)
			if tc.replayed {
				want, wantRuns = tc.first, 1
			}
			if w.Code != http.StatusCreated || w.Body.String() != want || replayed != tc.replayed || runs.Load() != wantRuns {
				t.Fatalf("retry: %d %q replayed=%v after %d runs; want 201 %q replayed=%v after %d",
					w.Code, w.Body, replayed, runs.Load(), want, tc.replayed, wantRuns)
			}
		})
	}
}
