package ginlock_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

// A lock lost on our clock only (WithTTL: the local deadline is drift(ttl) before Redis's)
// is still ours in Redis; ginlock releases it on its lost path too, so the 409's promise that
// a retry runs holds at once.
func TestLostLockIsReleasedInRedis(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey, ginlock.WithTTL(5*time.Second)), func(c *gin.Context) {
		<-c.Request.Context().Done()
	})
	wantProblem(t, do(r, req{path: "/accounts/7"}), http.StatusConflict)
	if keys := locktest.Held(t, e.rdb); len(keys) != 0 {
		pttl, _ := e.rdb.PTTL(context.Background(), keys[0]).Result()
		t.Fatalf("after the lost-lock 409 the lock is still held in Redis: %v (pttl %v); "+
			"a retry now gets %d", keys, pttl, do(r, req{path: "/accounts/7"}).Code)
	}
}

// A streaming handler that stops when the client goes away (ctx.Done, c.Stream) returns
// without any failed write: the cut-short stream must not be stored and replayed.
func TestStreamCutShortByClientGoneNotStored(t *testing.T) {
	first, w, runs := exportTwice(t, func(c *gin.Context, client *hangUp) {
		ctx := c.Request.Context()
		c.Header("Content-Type", "text/plain")
		for i := range 3 {
			select {
			case <-ctx.Done():
				return // client gone: stop streaming
			default:
			}
			_, _ = fmt.Fprintf(c.Writer, "chunk%d\n", i)
			c.Writer.Flush()
			if i == 0 {
				client.now() // the client hangs up after the first chunk
			}
		}
	})
	if got := first.Body.String(); got != "chunk0\n" {
		t.Fatalf("first: body %q, want the cut-short stream", got)
	}
	if w.Header().Get(ginlock.ReplayedHeader) == "true" || runs != 2 {
		t.Fatalf("retry after a stream cut short: %d %q replayed=%q after %d runs; want the handler to run again",
			w.Code, w.Body, w.Header().Get(ginlock.ReplayedHeader), runs)
	}
}

// encoding/json fills a struct field from members whose names differ only in case, the last
// one winning: {"amount":100,"Amount":5} and {"Amount":5,"amount":100} are different
// requests to a Go handler, so the second gets 422, not the first one's response.
func TestFingerprintTellsCaseVariantMembersApart(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.Status(http.StatusBadRequest)
			return
		}
		c.JSON(http.StatusCreated, gin.H{"charged": in.Amount})
	})
	key := idemKey(t)
	w1 := do(r, req{path: "/payments", user: "u", key: key, body: `{"amount":100,"Amount":5}`})
	w2 := do(r, req{path: "/payments", user: "u", key: key, body: `{"Amount":5,"amount":100}`})
	if w2.Code != http.StatusUnprocessableEntity {
		t.Fatalf("first charged %s; second (handler would charge 100) got %d %s replayed=%q, want 422",
			w1.Body, w2.Code, w2.Body, w2.Header().Get(ginlock.ReplayedHeader))
	}
}

// An error handler of the user's that panics while it renders the lost-lock 409 must not
// leave the lock held in Redis either: the retry that the 409 invites would find it busy for
// the rest of the lease.
func TestLostLockReleasedWhenErrorHandlerPanics(t *testing.T) {
	e := setup(t)
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatus(http.StatusInternalServerError)
	}))
	var rendered atomic.Int32
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey, ginlock.WithTTL(5*time.Second),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			rendered.Add(1)
			panic(fmt.Sprintf("rendering %d: %v", status, err))
		})), func(c *gin.Context) {
		<-c.Request.Context().Done()
	})
	if w := do(r, req{path: "/accounts/7"}); w.Code != http.StatusInternalServerError || rendered.Load() != 1 {
		t.Fatalf("lost lock, error handler panicked: %d after %d renders; want Recovery's 500 after one", w.Code, rendered.Load())
	}
	if keys := locktest.Held(t, e.rdb); len(keys) != 0 {
		pttl, _ := e.rdb.PTTL(context.Background(), keys[0]).Result()
		t.Fatalf("after the error handler panicked the lock is still held in Redis: %v (pttl %v)", keys, pttl)
	}
}
