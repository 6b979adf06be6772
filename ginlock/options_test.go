package ginlock_test

import (
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// WithMaxBody(math.MaxInt64), the natural "no cap", keeps the request body for the handler and
// fingerprints it: a retry with the same key and another payload is 422, not a replay.
func TestMaxBodyMaxInt64(t *testing.T) {
	e := setup(t)
	r := router()
	var got atomic.Value
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithMaxBody(math.MaxInt64)), func(c *gin.Context) {
		b, _ := io.ReadAll(c.Request.Body)
		got.Store(string(b))
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	key, body := idemKey(t), `{"account":7,"amount":100}`
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: body}); w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if g, _ := got.Load().(string); g != body {
		t.Fatalf("handler read body %q, want %q", g, body)
	}
	wantProblem(t, do(r, req{path: "/payments", user: "alice", key: key, body: `{"account":7,"amount":999999}`}),
		http.StatusUnprocessableEntity)
}

// A wait shorter than a Redis round trip bounds the wait for a busy lock, not the first look:
// a free lock is taken.
func TestTinyWaitTakesFreeLock(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/accounts/:id", ginlock.New(e.locks, accountKey, ginlock.WithWait(time.Microsecond)), func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusOK)
	})
	for range 5 {
		if w := do(r, req{path: "/accounts/7", user: "alice"}); w.Code != http.StatusOK {
			t.Fatalf("free lock, WithWait(1µs): %d %s, want 200", w.Code, w.Body)
		}
	}
	held, err := e.locks.Acquire(t.Context(), "account:7")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(t.Context()) }()
	wantProblem(t, do(r, req{path: "/accounts/7", user: "alice"}), http.StatusConflict)
	if runs.Load() != 5 {
		t.Fatalf("handler ran %d times, want 5", runs.Load())
	}
}

// WithReplay keeps responses at least a second, as asynqlock's done markers: a unit slip
// (WithReplay(24)) does not turn replay off unnoticed.
func TestReplayRetentionFloor(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, keyfunc.Join(keyfunc.IdempotencyKey()), ginlock.WithReplay(time.Nanosecond)), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	key := idemKey(t)
	do(r, req{path: "/payments", key: key, body: `{"amount":1}`})
	time.Sleep(300 * time.Millisecond)
	w := do(r, req{path: "/payments", key: key, body: `{"amount":1}`})
	if runs.Load() != 1 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry 300 ms later: handler ran %d times, replayed %q; want one run and a replay",
			runs.Load(), w.Header().Get("Idempotent-Replayed"))
	}
	keys := e.redisKeys(t, "*:done")
	if len(keys) != 1 {
		t.Fatalf("stored records %v, want one", keys)
	}
	if ttl := e.rdb.PTTL(t.Context(), keys[0]).Val(); ttl <= 0 || ttl > time.Second {
		t.Errorf("record kept %v, want the 1 s floor", ttl)
	}
}

// A nil option (a conditional one left unset) is skipped: the middleware works with the rest.
func TestNilOptionIsSkipped(t *testing.T) {
	e := setup(t)
	r := router()
	var opt ginlock.Option
	r.POST("/payments", ginlock.New(e.locks, payKey, opt, ginlock.WithWait(time.Second), nil), func(c *gin.Context) {
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	key := idemKey(t)
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: `{}`}); w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: `{}`}); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: status %d, not replayed: %s", w.Code, w.Body)
	}
}

// With WithReplicaAck and no replica to acknowledge, a free key under WithWait is 503 (the
// store cannot confirm the lock), as without WithWait: not a 409 for a request in progress.
func TestWaitUnacknowledgedLockIs503(t *testing.T) {
	e := setup(t, dlock.WithReplicaAck(1, time.Second))
	r := router()
	h := func(c *gin.Context) { c.Status(http.StatusCreated) }
	r.POST("/nowait", ginlock.New(e.locks, payKey), h)
	r.POST("/wait", ginlock.New(e.locks, payKey, ginlock.WithWait(200*time.Millisecond)), h)
	for _, path := range []string{"/nowait", "/wait"} {
		wantProblem(t, do(r, req{path: path, user: "alice", key: idemKey(t), body: `{}`}), http.StatusServiceUnavailable)
	}
}

// A nil WithReplayStatuses or WithErrorHandler restores the default, even after another
// value was given: a later nil undoes an earlier option, as the docs say.
func TestNilCallbacksRestoreDefaults(t *testing.T) {
	e := setup(t)
	r := router()
	var custom atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey,
		ginlock.WithReplayStatuses(func(int) bool { return false }), ginlock.WithReplayStatuses(nil),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			custom.Add(1)
			c.String(status, "custom")
		}), ginlock.WithErrorHandler(nil)),
		func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"ok": true}) })
	key := idemKey(t)
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: `{}`}); w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: `{}`}); w.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("retry: status %d, not replayed: the default statuses (201 stored) are not back", w.Code)
	}
	w := do(r, req{path: "/payments", user: "alice", body: `{}`}) // no Idempotency-Key: 400
	if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != ginlock.ProblemContentType || custom.Load() != 0 {
		t.Fatalf("missing key: %d %q after %d custom renders; want the default problem+json 400",
			w.Code, w.Header().Get("Content-Type"), custom.Load())
	}
}
