package ginlock_test

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// An answer that the handler flushes and then goes on under the lock (an audit write, a slow
// notification) reaches the client only once the lock is released: the client never has the
// whole answer while the next request for the key would find the lock held. A body with an
// announced length has its last byte held back; an answer that is whole with its headers (a
// HEAD answer, a 204, Content-Length 0) has its flush put off to the end of the chain. Before,
// the bodiless ones reached the client at the flush.
func TestFlushedAnswerArrivesAfterTheRelease(t *testing.T) {
	e := setup(t)
	r := router()
	var released atomic.Bool // set by a middleware outside ginlock, after it returned
	r.Use(func(c *gin.Context) {
		released.Store(false)
		c.Next()
		released.Store(true)
	})
	body := bytes.Repeat([]byte("0123456789"), 1000)
	answers := map[string]struct {
		method string
		answer gin.HandlerFunc
	}{
		"data":     {http.MethodPost, func(c *gin.Context) { c.Data(http.StatusOK, "text/plain", body) }},
		"head":     {http.MethodHead, func(c *gin.Context) { c.Data(http.StatusOK, "text/plain", body) }},
		"no-body":  {http.MethodPost, func(c *gin.Context) { c.Status(http.StatusNoContent) }},
		"length-0": {http.MethodPost, func(c *gin.Context) { c.Header("Content-Length", "0"); c.Status(http.StatusCreated) }},
	}
	for name, a := range answers {
		then := func(c *gin.Context) {
			a.answer(c)
			c.Writer.Flush()
			time.Sleep(50 * time.Millisecond) // goes on under the lock
		}
		r.Handle(a.method, "/replay/"+name, ginlock.New(e.locks, payKey), then)
		r.Handle(a.method, "/lock/"+name, ginlock.New(e.locks, keyfunc.Join(keyfunc.Const(name)), ginlock.WithoutReplay()), then)
	}
	srv := httptest.NewServer(r)
	defer srv.Close()
	for name, a := range answers {
		for _, route := range []string{"/replay/", "/lock/"} {
			t.Run(route+name, func(t *testing.T) {
				resp, _ := sendOver(t, a.method, srv.URL+route+name, idemKey(t), nil)
				if resp.StatusCode >= 300 {
					t.Fatalf("answer %d", resp.StatusCode)
				}
				if !released.Load() {
					t.Fatal("the client had the whole answer while the handler still ran under the lock")
				}
			})
		}
	}
}

// A write past a body that is whole with its last byte held back is refused as net/http
// refuses it without ginlock (http.ErrContentLength), and the client gets the body as
// announced. Before, the extra byte went out in the held byte's place.
func TestWritePastTheAnnouncedLengthRefused(t *testing.T) {
	e := setup(t)
	r := router()
	errs := make(chan error, 1)
	handler := func(c *gin.Context) {
		c.Header("Content-Length", "11")
		c.Status(http.StatusOK)
		_, _ = c.Writer.WriteString("hello world")
		_, err := c.Writer.WriteString("\n")
		errs <- err
	}
	r.POST("/bare", handler)
	r.POST("/replay", ginlock.New(e.locks, payKey), handler)
	r.POST("/lock", ginlock.New(e.locks, keyfunc.Join(keyfunc.Const("k")), ginlock.WithoutReplay()), handler)
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, route := range []string{"/bare", "/replay", "/lock"} {
		resp, b := sendOver(t, http.MethodPost, srv.URL+route, idemKey(t), nil)
		if err := <-errs; !errors.Is(err, http.ErrContentLength) {
			t.Errorf("%s: write past the announced length: %v, want http.ErrContentLength", route, err)
		}
		if resp.StatusCode != http.StatusOK || string(b) != "hello world" {
			t.Errorf("%s: %d %q, want 200 \"hello world\"", route, resp.StatusCode, b)
		}
	}
}

// A handler that panics after writing its whole body (an engine without Recovery: net/http
// drops the connection) still gets the body to the client, the byte held back included, as
// it would without ginlock; the answer is stored, and the retry gets it replayed.
func TestPanicAfterWholeBodyDeliversIt(t *testing.T) {
	e := setup(t)
	r := router()
	body := bytes.Repeat([]byte("0123456789"), 1000)
	r.POST("/export", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		c.Data(http.StatusOK, "application/octet-stream", body)
		panic("after the answer")
	})
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the panic
	srv.Start()
	defer srv.Close()
	key := idemKey(t)
	rq, err := http.NewRequest(http.MethodPost, srv.URL+"/export", nil)
	if err != nil {
		t.Fatal(err)
	}
	rq.Header.Set("X-User", "u")
	rq.Header.Set(keyfunc.IdempotencyKeyHeader, key)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !bytes.Equal(b, body) {
		t.Fatalf("answer of a handler that panicked after it: %d of %d bytes (%v), want all", len(b), len(body), err)
	}
	retry, b := sendOver(t, http.MethodPost, srv.URL+"/export", key, nil)
	if retry.Header.Get(ginlock.ReplayedHeader) != "true" || !bytes.Equal(b, body) {
		t.Fatalf("retry: replayed %q, %d bytes; want the stored answer", retry.Header.Get(ginlock.ReplayedHeader), len(b))
	}
}
