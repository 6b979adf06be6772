package ginlock_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// exportRequest is alice's POST /export with Idempotency-Key key.
func exportRequest(key string) *http.Request {
	q := httptest.NewRequest(http.MethodPost, "/export", strings.NewReader(`{}`))
	q.Header.Set("X-User", "alice")
	q.Header.Set(keyfunc.IdempotencyKeyHeader, key)
	return q
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
	cut := &brokenConn{ResponseRecorder: httptest.NewRecorder(), limit: 25}
	r.ServeHTTP(cut, exportRequest(key))
	if cut.Body.Len() != 25 {
		t.Fatalf("the first client got %d bytes, want 25", cut.Body.Len())
	}
	w := httptest.NewRecorder()
	r.ServeHTTP(w, exportRequest(key))
	if w.Header().Get(ginlock.ReplayedHeader) != "true" || w.Body.String() != full || runs.Load() != 1 {
		t.Fatalf("retry: replayed %q, %d bytes, after %d runs; want the full replay after 1",
			w.Header().Get(ginlock.ReplayedHeader), w.Body.Len(), runs.Load())
	}
}

// The body is stored as it went out, so its Content-Encoding is replayed with it, whatever
// WithReplayHeaders lists, to a retry that accepts that encoding.
func TestContentEncodingIsReplayed(t *testing.T) {
	e := setup(t)
	r := router()
	gz := gzipped(t, `{"id":42}`)
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("Content-Type")), func(c *gin.Context) {
		c.Header("Content-Encoding", "gzip")
		c.Data(http.StatusCreated, "application/json", gz)
	})
	gzipOK := map[string]string{"Accept-Encoding": "gzip"}
	q := req{path: "/payments", body: `{"amount":1}`, user: "alice", key: idemKey(t), header: gzipOK}
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

// gzipped returns s compressed with gzip.
func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A response stored compressed (the chain compressed it for the first attempt) is decoded
// for a retry that does not accept its encoding, as Accept-Encoding says (RFC 9110 12.5.3;
// no header: no encoding, as compressing middlewares read it); gzip and deflate are decoded,
// any other encoding is replayed as stored.
func TestCompressedReplayFollowsAcceptEncoding(t *testing.T) {
	e := setup(t)
	const plain = `{"id":42}`
	var zl bytes.Buffer
	zw := zlib.NewWriter(&zl)
	_, _ = zw.Write([]byte(plain))
	_ = zw.Close()
	stored := map[string][]byte{"gzip": gzipped(t, plain), "deflate": zl.Bytes(), "br": []byte("not decodable here")}
	for _, tc := range []struct {
		name, enc, accept string
		encoded           bool // replayed as stored, with its Content-Encoding
	}{
		{"gzip accepted", "gzip", "gzip", true},
		{"gzip in a list", "gzip", "deflate, gzip;q=0.5, br", true},
		{"gzip any coding", "gzip", "*", true},
		{"gzip other spelling", "gzip", "X-GZIP", true},
		{"gzip no header", "gzip", "", false},
		{"gzip other coding", "gzip", "br", false},
		{"gzip refused by weight", "gzip", "gzip;q=0; br", false},
		{"gzip refused though any", "gzip", "*, gzip;q=0", false},
		{"gzip any refused", "gzip", "*;q=0", false},
		{"gzip identity", "gzip", "identity", false},
		{"gzip bad weight", "gzip", "gzip;q=x", false},
		{"deflate no header", "deflate", "", false},
		{"br not decodable", "br", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := router()
			var runs atomic.Int32
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				runs.Add(1)
				c.Header("Content-Encoding", tc.enc)
				c.Data(http.StatusCreated, "application/json", stored[tc.enc])
			})
			key := idemKey(t)
			do(r, req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key,
				header: map[string]string{"Accept-Encoding": tc.enc}})
			q := req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key}
			if tc.accept != "" {
				q.header = map[string]string{"Accept-Encoding": tc.accept}
			}
			w := do(r, q)
			if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
				t.Fatalf("retry: %d, replayed %q, %d runs; want a replay of 201 after 1 run",
					w.Code, w.Header().Get(ginlock.ReplayedHeader), runs.Load())
			}
			ce := w.Header().Get("Content-Encoding")
			switch {
			case tc.encoded && (ce != tc.enc || !bytes.Equal(w.Body.Bytes(), stored[tc.enc])):
				t.Fatalf("Content-Encoding %q, body %q; want the stored %s body", ce, w.Body.Bytes(), tc.enc)
			case !tc.encoded && (ce != "" || w.Body.String() != plain):
				t.Fatalf("Content-Encoding %q, body %q; want %s without Content-Encoding", ce, w.Body.Bytes(), plain)
			}
			if w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("Content-Type %q", w.Header().Get("Content-Type"))
			}
		})
	}
}

// Compression outside ginlock (r.Use(gzip.Gzip(...)), the usual setup) leaves ginlock the
// plain body: the Content-Encoding the outer middleware set before the chain ran is not
// stored with it. Compression inside the chain (a gzip middleware after ginlock) is stored
// as it went out, and decoded on replay. Either way a retry from a client that does not ask
// for gzip gets plain JSON without the header.
func TestCompressionReplayedPlain(t *testing.T) {
	e := setup(t)
	for _, inner := range []bool{false, true} {
		t.Run(map[bool]string{false: "outer", true: "inner"}[inner], func(t *testing.T) {
			r := router()
			var runs atomic.Int32
			handler := func(c *gin.Context) {
				runs.Add(1)
				c.JSON(http.StatusCreated, gin.H{"id": 42})
			}
			if inner {
				r.POST("/payments", ginlock.New(e.locks, payKey), gzipMW, handler)
			} else {
				r.Use(gzipMW)
				r.POST("/payments", ginlock.New(e.locks, payKey), handler)
			}
			key := idemKey(t)
			first := do(r, req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key,
				header: map[string]string{"Accept-Encoding": "gzip"}})
			if first.Code != http.StatusCreated || first.Header().Get("Content-Encoding") != "gzip" {
				t.Fatalf("first: %d, Content-Encoding %q", first.Code, first.Header().Get("Content-Encoding"))
			}
			// Retry from a client (or proxy) that does not ask for gzip.
			w := do(r, req{path: "/payments", body: `{"amount":1}`, user: "alice", key: key})
			if w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
				t.Fatalf("retry: replayed %q, runs %d", w.Header().Get(ginlock.ReplayedHeader), runs.Load())
			}
			if ce := w.Header().Get("Content-Encoding"); ce != "" || w.Body.String() != `{"id":42}` {
				t.Fatalf("replay without Accept-Encoding: Content-Encoding %q, body %q", ce, w.Body.Bytes())
			}
		})
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
		{http.StatusNotModified, false},
		{http.StatusUnprocessableEntity, true},
		{http.StatusRequestTimeout, false},
		{http.StatusConflict, false},
		{http.StatusTooEarly, false},
		{http.StatusTooManyRequests, false},
		{499, false}, // Client Closed Request: a handler that saw its client leave
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
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

// gzipMW does what gin-contrib/gzip's handler does: for a client that accepts gzip it sets
// Content-Encoding and Vary *before* c.Next() and wraps c.Writer with a compressing writer.
func gzipMW(c *gin.Context) {
	if !strings.Contains(c.GetHeader("Accept-Encoding"), "gzip") {
		c.Next()
		return
	}
	gz := gzip.NewWriter(c.Writer)
	c.Header("Content-Encoding", "gzip")
	c.Header("Vary", "Accept-Encoding")
	c.Writer = &gzWriter{ResponseWriter: c.Writer, gz: gz}
	defer gz.Close()
	c.Next()
}

type gzWriter struct {
	gin.ResponseWriter
	gz *gzip.Writer
}

func (w *gzWriter) Write(p []byte) (int, error)       { return w.gz.Write(p) }
func (w *gzWriter) WriteString(s string) (int, error) { return w.gz.Write([]byte(s)) }

// A request without the (Optional) Idempotency-Key is never replayed, also with an explicit
// WithReplay (the way to change the retention): keyless requests must not share the "~"
// key's stored response.
func TestExplicitReplayWithoutKeyRuns(t *testing.T) {
	e := setup(t)
	optKey := keyfunc.Join(keyfunc.IdempotencyKey().Optional()).Scope(keyfunc.ContextValue(userKey{}).Named("user"))
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, optKey, ginlock.WithReplay(time.Hour)), func(c *gin.Context) {
		c.JSON(http.StatusCreated, gin.H{"payment": runs.Add(1)})
	})
	for i, body := range []string{`{"amount":5}`, `{"amount":5}`, `{"amount":7}`} {
		w := do(r, req{path: "/payments", body: body, user: "alice"})
		if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" {
			t.Errorf("keyless payment %d with WithReplay(1h): %d (replayed %q) %s; want a fresh 201",
				i, w.Code, w.Header().Get(ginlock.ReplayedHeader), w.Body)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("three keyless payments ran %d times", runs.Load())
	}
}

// An Idempotency-Key header sent empty counts as no key, for an Optional IdempotencyKey part
// and for a raw Header part: such requests run, locked under the "~" key (or ""), and are not
// replayed to each other.
func TestEmptyIdempotencyKeyHeaderIsNoKey(t *testing.T) {
	e := setup(t)
	user := keyfunc.ContextValue(userKey{}).Named("user")
	for name, key := range map[string]*keyfunc.Func{
		"IdempotencyKey().Optional()": keyfunc.Join(keyfunc.IdempotencyKey().Optional()).Scope(user),
		"Header(...).Optional()":      keyfunc.Join(keyfunc.Header(keyfunc.IdempotencyKeyHeader).Optional()).Scope(user),
	} {
		t.Run(name, func(t *testing.T) {
			r := router()
			var runs atomic.Int32
			r.POST("/payments", ginlock.New(e.locks, key), func(c *gin.Context) {
				c.JSON(http.StatusCreated, gin.H{"payment": runs.Add(1)})
			})
			for i, v := range []string{"", " ", ""} {
				w := do(r, req{path: "/payments", body: `{"amount":5}`, user: "alice",
					header: map[string]string{keyfunc.IdempotencyKeyHeader: v}})
				if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" {
					t.Fatalf("payment %d with the key %q: %d (replayed %q) %s", i, v, w.Code, w.Header().Get(ginlock.ReplayedHeader), w.Body)
				}
			}
			if runs.Load() != 3 {
				t.Fatalf("three payments with an empty key ran %d times", runs.Load())
			}
		})
	}
}

// gin routes by the decoded path (UseRawPath is off by default): /accounts/%31/withdraw and
// /accounts/1/withdraw reach the same handler with c.Param("id") = "1", so a MetaPath lock
// must give them one key, or a client spelling the path differently would run the handler
// alongside the locked one.
func TestPathSpellingSharesLock(t *testing.T) {
	e := setup(t)
	r := router()
	r.RemoveExtraSlash = true // Gin then routes //accounts/1 and /accounts/2/../1 to /accounts/:id
	pathKey := keyfunc.Join(keyfunc.Meta(keyfunc.MetaPath))
	started, release := make(chan struct{}), make(chan struct{})
	var running, overlap atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, pathKey), func(c *gin.Context) {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		select {
		case started <- struct{}{}:
			<-release
		default:
		}
		c.JSON(http.StatusOK, gin.H{"account": c.Param("id")})
	})
	done := make(chan int)
	go func() { done <- do(r, req{path: "/accounts/1/withdraw", body: `{}`}).Code }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("first request did not start")
	}
	for _, spelling := range []string{"/accounts/%31/withdraw", "/accounts//1/withdraw", "//accounts/1/withdraw", "/accounts/2/../1/withdraw"} {
		w := do(r, req{path: spelling, body: `{}`})
		if w.Code != http.StatusConflict || overlap.Load() != 0 {
			t.Errorf("same account, path spelled %s, while /accounts/1/withdraw holds the lock: %d %s, %d overlapping runs; want 409",
				spelling, w.Code, w.Body, overlap.Load())
		}
	}
	close(release)
	<-done
}

// Two spellings of the same URI (RFC 3986 6.2.2.2: %31 is "1") route to the same handler
// with the same c.Param("id"): the retry gets the replay, not 422.
func TestFingerprintIgnoresPathSpelling(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"account": c.Param("id")})
	})
	key := idemKey(t)
	if w := do(r, req{path: "/accounts/%31/withdraw", body: `{}`, user: "alice", key: key}); w.Code != http.StatusCreated ||
		w.Body.String() != `{"account":"1"}` {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	w := do(r, req{path: "/accounts/1/withdraw", body: `{}`, user: "alice", key: key})
	if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("same request, path spelled /accounts/1/withdraw: %d %s; want the replay", w.Code, w.Body)
	}
}

// gin's renderers that copy (c.DataFromReader, c.File, c.Stream) stop at the first failed
// write, so after a broken client connection the recorder holds a prefix. It is not stored as
// the complete response (its Content-Length says it is short): the retry runs the handler.
func TestCutStreamIsNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	full := strings.Repeat("x", 100_000) // several io.Copy chunks (32 KiB each)
	r.POST("/export", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.DataFromReader(http.StatusOK, int64(len(full)), "text/plain", struct{ io.Reader }{strings.NewReader(full)}, nil) // a file or upstream body, not a WriterTo
	})
	key := idemKey(t)
	r.ServeHTTP(&brokenConn{ResponseRecorder: httptest.NewRecorder(), limit: 25}, exportRequest(key))

	w := httptest.NewRecorder()
	r.ServeHTTP(w, exportRequest(key))
	if w.Header().Get(ginlock.ReplayedHeader) != "" || w.Body.Len() != len(full) || runs.Load() != 2 {
		t.Fatalf("retry: %d with %d of %d body bytes, replayed %q, after %d runs; want the handler to run again",
			w.Code, w.Body.Len(), len(full), w.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}
