package ginlock_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// A handler that tries to take over the connection after it answered (a library that
// upgrades when it can and otherwise carries on) is refused by gin: the body was written
// already. The connection stays with net/http and the client gets the answer as written, so
// that answer is stored like any other, and a retry replays it instead of paying again.
func TestFailedHijackStillStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	var hijackErr error
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.String(http.StatusCreated, "paid")
		_, _, hijackErr = c.Writer.Hijack()
	})
	key := idemKey(t)
	first := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	if hijackErr == nil {
		t.Fatal("Hijack after the body was written succeeded; the test needs it refused")
	}
	if first.Code != http.StatusCreated || first.Body.String() != "paid" {
		t.Fatalf("first: %d %q", first.Code, first.Body)
	}
	retry := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
	if runs.Load() != 1 || retry.Code != http.StatusCreated || retry.Body.String() != "paid" ||
		retry.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q replayed=%q after %d handler runs; want the stored 201 replayed, one run",
			retry.Code, retry.Body, retry.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}

// A handler that takes over the connection (a protocol upgrade, a body sent raw) writes what
// the recorder cannot see: nothing is stored, the lock is released when the handler returns, and a retry
// runs the handler again rather than replaying half an answer.
func TestHijackedNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		// The status line and headers go out through gin, the body through the taken
		// connection: to the recorder the answer looks like a bodiless 201.
		c.Header("Transfer-Encoding", "identity") // the body runs to the connection's close
		c.Status(http.StatusCreated)
		c.Writer.WriteHeaderNow()
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer func() { _ = conn.Close() }()
		_, _ = rw.WriteString("paid")
		_ = rw.Flush()
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	key := idemKey(t)
	send := func() (int, string, string) {
		t.Helper()
		q, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
		if err != nil {
			t.Fatal(err)
		}
		q.Header.Set("Content-Type", "application/json")
		q.Header.Set("X-User", "alice")
		q.Header.Set("Idempotency-Key", key)
		q.Close = true
		resp, err := srv.Client().Do(q)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(bufio.NewReader(resp.Body))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), resp.Header.Get(ginlock.ReplayedHeader)
	}
	if code, body, _ := send(); code != http.StatusCreated || body != "paid" {
		t.Fatalf("first: %d %q", code, body)
	}
	// The client has the whole answer once the handler closes the connection, a moment
	// before the handler returns and the middleware releases the lock: a retry sent in
	// between is in flight (409). Retry until the lock is free.
	code, body, replayed := send()
	for deadline := time.Now().Add(5 * time.Second); code == http.StatusConflict && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		code, body, replayed = send()
	}
	if code != http.StatusCreated || body != "paid" || replayed != "" || runs.Load() != 2 {
		t.Fatalf("retry: %d %q replayed=%q after %d handler runs; want the handler run again, nothing replayed",
			code, body, replayed, runs.Load())
	}
}
