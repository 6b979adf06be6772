package ginlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// FuzzMiddleware sends random methods, paths, query strings, headers (Idempotency-Key
// included) and bodies through real Gin routes protected by ginlock on a real Redis, started
// once for the fuzz target. It checks that nothing panics, that every response the middleware
// makes itself is a 4xx (or 503) application/problem+json body naming its status, that no
// response is another 5xx, and that every derived key is bounded printable ASCII without
// braces, as are the Redis keys it leads to.
//
//	go test -run '^$' -fuzz=FuzzMiddleware -fuzztime=30s ./ginlock/
func FuzzMiddleware(f *testing.F) {
	e := setup(f)
	var lastKey string // the key of the request being served; inputs run one at a time
	handler := func(c *gin.Context) {
		if lk, ok := ginlock.FromContext(c); ok {
			lastKey = lk.Key()
		}
		c.JSON(http.StatusOK, gin.H{"ok": true})
	}
	retention := ginlock.WithReplay(10 * time.Second) // keeps Redis small over a long run
	r := router()
	r.POST("/pay/:id", ginlock.New(e.locks, keyfunc.MustTemplate("pay:{id}:{key}", map[string]keyfunc.Part{
		"id": keyfunc.Param("id"), "key": keyfunc.IdempotencyKey(),
	}).Scope(keyfunc.ContextValue(userKey{}).Named("user").Optional()), retention), handler)
	r.POST("/orders", ginlock.New(e.locks, keyfunc.Join(keyfunc.JSON("order.id"), keyfunc.IdempotencyKey().Optional()),
		retention, ginlock.WithMaxBody(4096)), handler)
	withdraw := ginlock.New(e.locks, keyfunc.Join(keyfunc.Param("id"), keyfunc.Query("currency").Optional(),
		keyfunc.Header("X-Tenant").Optional()), ginlock.WithoutReplay())
	r.POST("/accounts/:id/withdraw", withdraw, handler)
	r.PUT("/accounts/:id/withdraw", withdraw, handler)
	r.POST("/forms", ginlock.New(e.locks, keyfunc.Join(keyfunc.Form("ref"), keyfunc.BodyHash()), retention), handler)
	r.Any("/any/*rest", ginlock.New(e.locks, keyfunc.Join(keyfunc.Meta(keyfunc.MetaPath), keyfunc.IdempotencyKey())), handler)

	f.Add("POST", "/pay/42", "k-1", "alice", "application/json", []byte(`{"amount":100}`), "X-Tenant", "t1")
	f.Add("POST", "/orders", `"quoted \" key"`, "", "application/json", []byte(`{"order":{"id":1e2}}`), "", "")
	f.Add("POST", "/orders", "k", "bob", "application/json", []byte(`{"order":{"id":`+strings.Repeat("[", 100)+`}}`), "", "")
	f.Add("PUT", "/accounts/%7Bx%7D/withdraw?currency=%00eur", "", "", "", []byte(nil), "X-Tenant", "\xff\xfe")
	f.Add("POST", "/forms", "", "", "application/x-www-form-urlencoded", []byte("ref=a%00b&x=1"), "", "")
	f.Add("POST", "/forms", "", "", "multipart/form-data; boundary=xx", []byte("--xx\r\nContent-Disposition: form-data; name=\"ref\"\r\n\r\nr1\r\n--xx--\r\n"), "", "")
	f.Add("DELETE", "/any/a/../../b", strings.Repeat("k", 256), "\x00", "text/plain", bytes.Repeat([]byte("x"), 5000), "Idempotency-Key", "second")
	f.Add("GET", "/any/", "\t\"\"\t", "u", "application/json", []byte(`{"a":`), "Content-Length", "-1")

	execs := 0
	f.Fuzz(func(t *testing.T, method, target, key, user, ctype string, body []byte, hname, hval string) {
		path, query, _ := strings.Cut(target, "?")
		if !strings.HasPrefix(path, "/") { // what an HTTP server hands a handler
			path = "/" + path
		}
		req := (&http.Request{
			Method: method, URL: &url.URL{Path: path, RawQuery: query}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
			Host: "example.test", RemoteAddr: "192.0.2.1:1234", RequestURI: target,
		}).WithContext(context.Background())
		for name, v := range map[string]string{keyfunc.IdempotencyKeyHeader: key, "X-User": user, "Content-Type": ctype, hname: hval} {
			if name != "" && v != "" {
				req.Header[http.CanonicalHeaderKey(name)] = append(req.Header[http.CanonicalHeaderKey(name)], v)
			}
		}
		lastKey = ""
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)

		if w.Header().Get("Content-Type") == ginlock.ProblemContentType {
			switch w.Code {
			case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
			case http.StatusInternalServerError:
				// The test auth puts X-User in the context unchecked: a user over the part cap
				// is a server-set value keyfunc cannot use (keyfunc.ErrContextValue).
				if len(user) <= keyfunc.DefaultMaxLen {
					t.Fatalf("middleware answered %d: %s", w.Code, w.Body)
				}
			default:
				t.Fatalf("middleware answered %d: %s", w.Code, w.Body)
			}
			var p struct {
				Status int    `json:"status"`
				Title  string `json:"title"`
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code || p.Title == "" || p.Detail == "" {
				t.Fatalf("problem body %q (%v) for status %d", w.Body, err, w.Code)
			}
		} else if w.Code >= 500 {
			t.Fatalf("status %d without a problem body: %s", w.Code, w.Body)
		}
		if lastKey != "" {
			checkKey(t, lastKey, keyfunc.DefaultMaxKeyLen)
		}
		// Now and then, the keys in Redis: the lock layer's prefix, hash tag and suffix on top
		// of a bounded key.
		if execs++; execs%200 == 0 {
			keys, _, err := e.rdb.Scan(context.Background(), 0, "*", 1000).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				checkKey(t, strings.NewReplacer("{", "", "}", "").Replace(k), keyfunc.DefaultMaxKeyLen+32)
			}
		}
	})
}

// checkKey fails t unless key is at most limit bytes of printable ASCII without braces.
func checkKey(t *testing.T, key string, limit int) {
	t.Helper()
	if len(key) > limit {
		t.Fatalf("key of %d bytes, bound %d: %.80q...", len(key), limit, key)
	}
	for i := range len(key) {
		if c := key[i]; c < 0x21 || c > 0x7e || c == '{' || c == '}' {
			t.Fatalf("key %q holds byte %#x", key, c)
		}
	}
}
