package ginlock_test

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// With 5xx stored (WithReplayStatuses, as Stripe does), a handler that started a 500 answer
// and panicked part-way through its body must not have that cut body replayed: with gin's
// Recovery before ginlock it is not (the after-a-panic rule), nor with a Recovery placed
// after ginlock, whose 500 asked for too late is the status already sent. (A recovery after
// ginlock that asks for no status once the response started leaves no trace to see: the
// docs say to place Recovery before ginlock.)
func TestRecoveryAfterGinlockPanicInA500Answer(t *testing.T) {
	storeAll := ginlock.WithReplayStatuses(func(int) bool { return true })
	for _, tc := range []struct {
		name     string
		recovery gin.HandlerFunc
	}{
		{"recovery before ginlock", nil},
		{"recovery after ginlock", gin.RecoveryWithWriter(io.Discard)},
		{"custom recovery after ginlock rendering a 500", gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "internal"})
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			var runs atomic.Int32
			handler := func(c *gin.Context) {
				c.Status(http.StatusInternalServerError)
				_, _ = c.Writer.WriteString(`{"error":"upstream`)
				if runs.Add(1) == 1 {
					panic("part-way through the error body")
				}
				_, _ = c.Writer.WriteString(` timed out"}`)
			}
			chain := []gin.HandlerFunc{ginlock.New(e.locks, payKey, storeAll)}
			if tc.recovery == nil {
				r.Use(gin.RecoveryWithWriter(io.Discard))
			} else {
				chain = append(chain, tc.recovery)
			}
			r.POST("/payments", append(chain, handler)...)
			q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
			first := do(r, q)
			t.Logf("first: %d %q", first.Code, first.Body)
			w := do(r, q)
			replayed := w.Header().Get(ginlock.ReplayedHeader) == "true"
			if replayed || runs.Load() != 2 {
				t.Fatalf("retry: %d %q replayed=%v after %d runs; want the handler run again (a body cut by a panic is not the whole answer)",
					w.Code, w.Body, replayed, runs.Load())
			}
		})
	}
}
