package ginlock_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// The payment and account recipes combined: when the account lock is busy, the inner
// middleware answers 409 before the handler runs. The outer one must not store that 409, or
// the retry it invites would be answered with it for a day.
func TestNestedRejectionIsNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/accounts/:id/pay", ginlock.New(e.locks, payKey), ginlock.New(e.locks, accountKey),
		func(c *gin.Context) {
			runs.Add(1)
			c.JSON(http.StatusCreated, gin.H{"ok": true})
		})
	held, err := e.locks.TryAcquire(context.Background(), "account:7")
	if err != nil {
		t.Fatal(err)
	}
	q := req{path: "/accounts/7/pay", body: `{"amount":1}`, user: "alice", key: idemKey(t)}
	wantProblem(t, do(r, q), http.StatusConflict)
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := do(r, q)
	if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" || runs.Load() != 1 {
		t.Fatalf("retry once the account is free: %d (replayed %q) after %d runs, want the handler's 201",
			w.Code, w.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
	if w := do(r, q); w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("second retry: %d (replayed %q), want the stored 201", w.Code, w.Header().Get(ginlock.ReplayedHeader))
	}
}

// Path parameters and the query are part of what a request asks for: the same key reused on
// another account, or with another amount in the query, is 422, never the first response.
func TestFingerprintCoversPathAndQuery(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	h := func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"account": c.Param("id"), "amount": c.Query("amount")})
	}
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, payKey), h)
	for _, tc := range []struct{ name, first, reused, same string }{
		{"path parameter", "/accounts/1/withdraw", "/accounts/2/withdraw", "/accounts/1/withdraw"},
		{"query", "/accounts/1/withdraw?amount=100&currency=EUR", "/accounts/1/withdraw?amount=999&currency=EUR",
			"/accounts/1/withdraw?currency=EUR&amount=100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs.Store(0)
			key := idemKey(t)
			if w := do(r, req{path: tc.first, body: `{}`, user: "alice", key: key}); w.Code != http.StatusCreated {
				t.Fatalf("first: %d %s", w.Code, w.Body)
			}
			p := wantProblem(t, do(r, req{path: tc.reused, body: `{}`, user: "alice", key: key}), http.StatusUnprocessableEntity)
			if !strings.Contains(p.Detail, "different") {
				t.Fatalf("detail %q", p.Detail)
			}
			w := do(r, req{path: tc.same, body: `{}`, user: "alice", key: key})
			if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
				t.Fatalf("same request (query in another order): %d replayed %q after %d runs, want the replay",
					w.Code, w.Header().Get(ginlock.ReplayedHeader), runs.Load())
			}
		})
	}
}

// A key whose Idempotency-Key is Optional: requests that carry one are replayed, requests
// without one run every time (they are still locked, under the "~" key).
func TestRequestWithoutOptionalKeyIsNotReplayed(t *testing.T) {
	e := setup(t)
	optKey := keyfunc.Join(keyfunc.IdempotencyKey().Optional()).Scope(keyfunc.ContextValue(userKey{}).Named("user"))
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, optKey), func(c *gin.Context) {
		c.JSON(http.StatusCreated, gin.H{"payment": runs.Add(1)})
	})
	for i, body := range []string{`{"amount":5}`, `{"amount":5}`, `{"amount":7}`} {
		w := do(r, req{path: "/payments", body: body, user: "alice"})
		if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" {
			t.Fatalf("keyless payment %d: %d (replayed %q) %s", i, w.Code, w.Header().Get(ginlock.ReplayedHeader), w.Body)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("three keyless payments ran %d times", runs.Load())
	}
	if keys := e.redisKeys(t, "*:done"); len(keys) != 0 {
		t.Fatalf("keyless requests stored records: %v", keys)
	}
	q := req{path: "/payments", body: `{"amount":5}`, user: "alice", key: idemKey(t)}
	do(r, q)
	if w := do(r, q); w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 4 {
		t.Fatalf("with a key: replayed %q after %d runs, want the replay after 4", w.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}

// brokenConn is a client connection that breaks after limit bytes of body.
type brokenConn struct {
	*httptest.ResponseRecorder
	limit int
}

func (w *brokenConn) Write(p []byte) (int, error) {
	room := max(w.limit-w.Body.Len(), 0)
	if len(p) > room {
		n, _ := w.ResponseRecorder.Write(p[:room])
		return n, errors.New("write: broken pipe")
	}
	return w.ResponseRecorder.Write(p)
}

func (w *brokenConn) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// The record is what the handler wrote, not what reached the client: a client whose
// connection broke mid-response gets the whole response when it retries, and the handler
// does not run twice.
func TestResponseStoredAsWritten(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	full := strings.Repeat("x", 100)
	r.POST("/export", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.String(http.StatusOK, full)
	})
	key := idemKey(t)
	newReq := func() *http.Request {
		q := httptest.NewRequest(http.MethodPost, "/export", strings.NewReader(`{}`))
		q.Header.Set("X-User", "alice")
		q.Header.Set(keyfunc.IdempotencyKeyHeader, key)
		return q
	}
	cut := &brokenConn{ResponseRecorder: httptest.NewRecorder(), limit: 25}
	r.ServeHTTP(cut, newReq())
	if cut.Body.Len() != 25 {
		t.Fatalf("the first client got %d bytes, want 25", cut.Body.Len())
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, newReq())
	if w.Header().Get(ginlock.ReplayedHeader) != "true" || w.Body.String() != full || runs.Load() != 1 {
		t.Fatalf("retry: replayed %q, %d bytes, after %d runs; want the full replay after 1",
			w.Header().Get(ginlock.ReplayedHeader), w.Body.Len(), runs.Load())
	}
}

// The body is stored as it went out, so its Content-Encoding is replayed with it, whatever
// WithReplayHeaders lists.
func TestContentEncodingIsReplayed(t *testing.T) {
	e := setup(t)
	r := router()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"id":42}`))
	_ = zw.Close()
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("Content-Type")), func(c *gin.Context) {
		c.Header("Content-Encoding", "gzip")
		c.Data(http.StatusCreated, "application/json", gz.Bytes())
	})
	q := req{path: "/payments", body: `{"amount":1}`, user: "alice", key: idemKey(t)}
	do(r, q)
	w := do(r, q)
	if w.Header().Get(ginlock.ReplayedHeader) != "true" || w.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("replay: replayed %q, Content-Encoding %q, want a replay with gzip",
			w.Header().Get(ginlock.ReplayedHeader), w.Header().Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatalf("replayed body: %v", err)
	}
	var plain bytes.Buffer
	if _, err := plain.ReadFrom(zr); err != nil || plain.String() != `{"id":42}` {
		t.Fatalf("replayed body decodes to %q (%v)", plain.String(), err)
	}
}

// By default a redirect is stored (a 303 after a POST points at what the request made),
// and the 4xx that mean "not now" are not: the retry they invite runs the handler.
func TestDefaultReplayStatuses(t *testing.T) {
	e := setup(t)
	for _, tc := range []struct {
		status int
		stored bool
	}{
		{http.StatusSeeOther, true},
		{http.StatusUnprocessableEntity, true},
		{http.StatusRequestTimeout, false},
		{http.StatusConflict, false},
		{http.StatusTooEarly, false},
		{http.StatusTooManyRequests, false},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			r := router()
			var runs atomic.Int32
			r.POST("/orders", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				runs.Add(1)
				c.Header("Location", "/orders/42")
				c.Status(tc.status)
			})
			q := req{path: "/orders", user: "alice", key: idemKey(t)}
			do(r, q)
			w := do(r, q)
			replayed := w.Header().Get(ginlock.ReplayedHeader) == "true"
			if w.Code != tc.status || replayed != tc.stored || int(runs.Load()) != map[bool]int{true: 1, false: 2}[tc.stored] {
				t.Fatalf("second request: %d, replayed %v, %d runs; want %d, replayed %v",
					w.Code, replayed, runs.Load(), tc.status, tc.stored)
			}
			if tc.stored && w.Header().Get("Location") != "/orders/42" {
				t.Fatalf("replayed Location %q", w.Header().Get("Location"))
			}
		})
	}
}
