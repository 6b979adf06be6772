package ginlock_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// sendOver sends one request to a real server, so that net/http's framing (Content-Length,
// chunking, trailers, HEAD) is what the client sees, and returns the answer and its body.
func sendOver(t *testing.T, method, url, key string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	rq, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	rq.Header.Set("X-User", "u")
	rq.Header.Set(keyfunc.IdempotencyKeyHeader, key)
	for k, v := range header {
		rq.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(rq)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, b
}

// writeFile writes n bytes of text to a new file and returns its path and content.
func writeFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	content := bytes.Repeat([]byte("0123456789"), n/10)
	path := filepath.Join(t.TempDir(), "f.txt")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

// A length the handler announced is the replay's too: a HEAD answer (its length is all it
// says), and a body over net/http's 2 KiB buffer, which would otherwise go chunked. Before,
// the replay of a HEAD had no Content-Length and a large file came back chunked.
func TestReplayKeepsAnnouncedLength(t *testing.T) {
	e := setup(t)
	r := router()
	path, content := writeFile(t, 10_000)
	var runs atomic.Int32
	mw := ginlock.New(e.locks, payKey)
	r.GET("/file", mw, func(c *gin.Context) { runs.Add(1); c.File(path) })
	r.HEAD("/file", mw, func(c *gin.Context) { runs.Add(1); c.File(path) })
	r.HEAD("/size", mw, func(c *gin.Context) {
		runs.Add(1)
		c.Header("Content-Length", "42")
		c.Status(http.StatusOK)
	})
	r.GET("/small", mw, func(c *gin.Context) { runs.Add(1); c.JSON(http.StatusOK, gin.H{"ok": true}) })
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, tc := range []struct {
		method, path string
		length       int64
		body         []byte
	}{
		{http.MethodGet, "/file", 10_000, content},
		{http.MethodHead, "/file", 10_000, nil},
		{http.MethodHead, "/size", 42, nil},
		{http.MethodGet, "/small", int64(len(`{"ok":true}`)), []byte(`{"ok":true}`)},
	} {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			key := idemKey(t)
			before := runs.Load()
			for i, name := range []string{"first answer", "replay"} {
				resp, b := sendOver(t, tc.method, srv.URL+tc.path, key, nil)
				if resp.StatusCode != http.StatusOK || (resp.Header.Get(ginlock.ReplayedHeader) == "true") != (i == 1) {
					t.Fatalf("%s: %d, replayed %q", name, resp.StatusCode, resp.Header.Get(ginlock.ReplayedHeader))
				}
				if resp.ContentLength != tc.length || len(resp.TransferEncoding) != 0 {
					t.Fatalf("%s: Content-Length %d, Transfer-Encoding %q; want %d, not chunked",
						name, resp.ContentLength, resp.TransferEncoding, tc.length)
				}
				if !bytes.Equal(b, tc.body) {
					t.Fatalf("%s: body of %d bytes, want %d", name, len(b), len(tc.body))
				}
			}
			if n := runs.Load() - before; n != 1 {
				t.Fatalf("handler ran %d times, want once", n)
			}
		})
	}
}

// Trailers are not stored: the replay has the body and none of the first answer's trailers,
// as WithReplayHeaders says.
func TestReplayHasNoTrailers(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/signed", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		c.Header("Trailer", "X-Checksum")
		c.String(http.StatusOK, "body")
		c.Writer.Header().Set("X-Checksum", "abc")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	key := idemKey(t)
	first, b1 := sendOver(t, http.MethodPost, srv.URL+"/signed", key, nil)
	replay, b2 := sendOver(t, http.MethodPost, srv.URL+"/signed", key, nil)
	if first.Trailer.Get("X-Checksum") != "abc" || string(b1) != "body" {
		t.Fatalf("first answer: trailer %v, body %q", first.Trailer, b1)
	}
	if replay.Header.Get(ginlock.ReplayedHeader) != "true" || string(b2) != "body" || len(replay.Trailer) != 0 {
		t.Fatalf("replay: replayed %q, body %q, trailer %v; want the body without trailers",
			replay.Header.Get(ginlock.ReplayedHeader), b2, replay.Trailer)
	}
}

// A 206 answers the request's own Range, which the fingerprint does not cover: it is not
// stored, so a retry for the whole file (or another range) gets its own answer. Before, the
// retry without Range got the first 10 bytes replayed as a 206 without Content-Range.
func TestRangeAnswersNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	path, content := writeFile(t, 100)
	var runs atomic.Int32
	r.GET("/file", ginlock.New(e.locks, payKey), func(c *gin.Context) { runs.Add(1); c.File(path) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	key := idemKey(t)

	part, b := sendOver(t, http.MethodGet, srv.URL+"/file", key, map[string]string{"Range": "bytes=0-9"})
	if part.StatusCode != http.StatusPartialContent || part.Header.Get("Content-Range") != "bytes 0-9/100" || string(b) != string(content[:10]) {
		t.Fatalf("range: %d %q %q", part.StatusCode, part.Header.Get("Content-Range"), b)
	}
	past, _ := sendOver(t, http.MethodGet, srv.URL+"/file", key, map[string]string{"Range": "bytes=500-"})
	if past.StatusCode != http.StatusRequestedRangeNotSatisfiable || past.Header.Get(ginlock.ReplayedHeader) != "" {
		t.Fatalf("range past the end: %d, replayed %q; want the handler's own 416", past.StatusCode, past.Header.Get(ginlock.ReplayedHeader))
	}
	whole, b := sendOver(t, http.MethodGet, srv.URL+"/file", key, nil)
	if whole.StatusCode != http.StatusOK || whole.Header.Get(ginlock.ReplayedHeader) != "" || !bytes.Equal(b, content) {
		t.Fatalf("whole file with the same key: %d, replayed %q, %d bytes; want the handler's own 200 with all %d",
			whole.StatusCode, whole.Header.Get(ginlock.ReplayedHeader), len(b), len(content))
	}
	again, b := sendOver(t, http.MethodGet, srv.URL+"/file", key, nil)
	if again.Header.Get(ginlock.ReplayedHeader) != "true" || !bytes.Equal(b, content) || runs.Load() != 3 {
		t.Fatalf("retry of the whole file: replayed %q, %d bytes, %d runs; want the stored 200 after 3 runs",
			again.Header.Get(ginlock.ReplayedHeader), len(b), runs.Load())
	}
}

// Values the handler added to a header a middleware before ginlock had set are added to the
// retry's own on replay, as they were in the first answer (a CORS middleware's Vary: Origin
// stays beside the handler's Accept-Language; before, the replay dropped Origin, and a shared
// cache could serve one origin's answer to another). A header the handler replaced is
// replaced.
func TestReplayAddsToOuterValues(t *testing.T) {
	e := setup(t)
	r := router()
	r.Use(func(c *gin.Context) {
		c.Writer.Header().Add("Vary", "Origin")
		c.Header("Cache-Control", "no-store")
		c.Next()
	})
	var runs atomic.Int32
	r.POST("/quote", ginlock.New(e.locks, payKey, ginlock.WithReplayHeaders("Content-Type", "Vary", "Cache-Control")),
		func(c *gin.Context) {
			runs.Add(1)
			c.Writer.Header().Add("Vary", "Accept-Language")
			c.Header("Cache-Control", "private, max-age=60")
			c.JSON(http.StatusCreated, gin.H{"price": 10})
		})
	key := idemKey(t)
	first := do(r, req{path: "/quote", user: "u", key: key, body: `{}`})
	replay := do(r, req{path: "/quote", user: "u", key: key, body: `{}`})
	if replay.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("replayed %q after %d runs", replay.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
	for _, name := range []string{"Vary", "Cache-Control"} {
		if got, want := replay.Header().Values(name), first.Header().Values(name); !slices.Equal(got, want) {
			t.Errorf("replay %s = %q, first answer %q", name, got, want)
		}
	}
	if got := strings.Join(replay.Header().Values("Vary"), ", "); got != "Origin, Accept-Language" {
		t.Errorf("replay Vary = %q, want Origin, Accept-Language", got)
	}
}

// The client never has the whole answer while the lock is still held: a request for the same
// key sent the moment the answer ends gets the replay (or, with a per-account lock, runs),
// never 409, without WithWait. A large answer with its length announced (c.Data, c.File)
// goes out as it is written, so ginlock holds its last byte back until the lock is released
// and the answer stored (before, the next request got 409); a large one without goes chunked,
// and net/http ends it only after the chain returns.
func TestLargeAnswerEndsAfterTheRelease(t *testing.T) {
	e := setup(t)
	r := router()
	path, content := writeFile(t, 10_000)
	var runs atomic.Int32
	answers := map[string]gin.HandlerFunc{
		"data":    func(c *gin.Context) { runs.Add(1); c.Data(http.StatusOK, "application/octet-stream", content) },
		"file":    func(c *gin.Context) { runs.Add(1); c.File(path) },
		"chunked": func(c *gin.Context) { runs.Add(1); c.Status(http.StatusOK); _, _ = c.Writer.Write(content) },
		"string": func(c *gin.Context) {
			runs.Add(1)
			c.Header("Content-Length", strconv.Itoa(len(content)))
			c.Status(http.StatusOK)
			_, _ = c.Writer.WriteString(string(content[:4000]))
			_, _ = c.Writer.WriteString(string(content[4000:]))
		},
	}
	for name, h := range answers {
		r.POST("/replay/"+name, ginlock.New(e.locks, payKey), h)
		r.POST("/account/"+name, ginlock.New(e.locks, keyfunc.Join(keyfunc.Const(name)), ginlock.WithoutReplay()), h)
	}
	srv := httptest.NewServer(r)
	defer srv.Close()
	for name := range answers {
		t.Run(name, func(t *testing.T) {
			for i := range 30 {
				key := idemKey(t)
				for j, route := range []string{"/replay/", "/replay/", "/account/", "/account/"} {
					resp, b := sendOver(t, http.MethodPost, srv.URL+route+name, key, nil)
					if resp.StatusCode != http.StatusOK || !bytes.Equal(b, content) {
						t.Fatalf("round %d, request %d (%s): %d with %d bytes; want 200 with all %d (the lock released before the answer ended)",
							i, j, route, resp.StatusCode, len(b), len(content))
					}
					if replayed := resp.Header.Get(ginlock.ReplayedHeader) == "true"; replayed != (j == 1) {
						t.Fatalf("round %d, request %d (%s): replayed %v", i, j, route, replayed)
					}
				}
			}
		})
	}
	if runs.Load() != 4*30*3 {
		t.Fatalf("handlers ran %d times, want %d", runs.Load(), 4*30*3)
	}
}

// A middleware inside ginlock that reads the answer's size sees all of it, the byte held back
// included.
func TestHeldByteCountsInSize(t *testing.T) {
	e := setup(t)
	r := router()
	size := make(chan int, 1)
	r.POST("/data", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		c.Next()
		size <- c.Writer.Size()
	}, func(c *gin.Context) { c.Data(http.StatusOK, "text/plain", []byte("receipt")) })
	w := do(r, req{path: "/data", user: "u", key: idemKey(t)})
	if w.Body.String() != "receipt" {
		t.Fatalf("body %q", w.Body)
	}
	if n := <-size; n != len("receipt") {
		t.Fatalf("Size() after the handler = %d, want %d", n, len("receipt"))
	}
}
