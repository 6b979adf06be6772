package ginlock_test

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
	"github.com/lockguard/lockguard/keyfunc"
)

// cutReader yields n bytes of 'x', then fails, the first time only when failOnce is shared
// across runs: an upstream body that broke off once.
type cutReader struct {
	n    int
	fail bool
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		if r.fail {
			return 0, errors.New("upstream connection reset")
		}
		return 0, io.EOF
	}
	k := min(len(p), r.n, 1000)
	for i := range k {
		p[i] = 'x'
	}
	r.n -= k
	return k, nil
}

// postTo sends a POST over a real connection and reads the whole answer; the read error is
// returned, not fatal (a body cut short is what some tests expect).
func postTo(t *testing.T, url, key, body string) (*http.Response, []byte, error) {
	t.Helper()
	rq, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rq.Header.Set("X-User", "u")
	rq.Header.Set(keyfunc.IdempotencyKeyHeader, key)
	resp, err := http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// A body whose source fails part-way (c.DataFromReader over an upstream that broke off) is
// cut short although every write reached the client: with its Content-Length announced, and
// without one (chunked). It is not stored: the retry runs the handler again and gets the
// whole body, not the cut one replayed as complete.
func TestBodyCutBySourceNotStored(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length int64
	}{{"content-length", 10_000}, {"chunked", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			var runs atomic.Int32
			r.POST("/export", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				first := runs.Add(1) == 1
				src := &cutReader{n: 10_000}
				if first {
					src = &cutReader{n: 4000, fail: true}
				}
				c.DataFromReader(http.StatusOK, tc.length, "application/octet-stream", src, nil)
			})
			srv := httptest.NewServer(r)
			defer srv.Close()
			key := idemKey(t)
			_, first, err := postTo(t, srv.URL+"/export", key, `{}`)
			if tc.length > 0 && err == nil {
				t.Fatalf("first answer: %d bytes read without error; want it cut short", len(first))
			}
			resp, b, err := postTo(t, srv.URL+"/export", key, `{}`)
			if err != nil || resp.Header.Get(ginlock.ReplayedHeader) == "true" || len(b) != 10_000 || runs.Load() != 2 {
				t.Fatalf("retry: replayed %q, %d bytes (%v), after %d runs; want the handler run again and the whole body",
					resp.Header.Get(ginlock.ReplayedHeader), len(b), err, runs.Load())
			}
		})
	}
}

// A 204 whose handler writes body bytes anyway (net/http refuses them with
// http.ErrBodyNotAllowed) is a whole answer over a healthy connection: stored once and
// replayed, without the refused bytes.
func TestNoContentWithBodyWritesIsStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/p", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusNoContent)
		_, _ = c.Writer.WriteString("{")
		_, _ = c.Writer.WriteString("}")
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	key := idemKey(t)
	r1, _, _ := postTo(t, srv.URL+"/p", key, `{}`)
	r2, b, _ := postTo(t, srv.URL+"/p", key, `{}`)
	if r1.StatusCode != http.StatusNoContent || r2.StatusCode != http.StatusNoContent ||
		r2.Header.Get(ginlock.ReplayedHeader) != "true" || len(b) != 0 || runs.Load() != 1 {
		t.Fatalf("first %d, retry %d replayed=%q with %d body bytes; handler ran %d times, want once and a replayed empty 204",
			r1.StatusCode, r2.StatusCode, r2.Header.Get(ginlock.ReplayedHeader), len(b), runs.Load())
	}
}

// With RemoveExtraSlash, /accounts//1/withdraw and /accounts/2/../1/withdraw reach the
// handler of /accounts/1/withdraw with the same id: a retry spelled another way is the same
// request, replayed, not a 422.
func TestFingerprintPathAsRouted(t *testing.T) {
	e := setup(t)
	r := router()
	r.RemoveExtraSlash = true
	var runs atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"account": c.Param("id")})
	})
	for _, spelling := range []string{"/accounts//1/withdraw", "/accounts/2/../1/withdraw"} {
		key := idemKey(t)
		w := do(r, req{path: spelling, body: `{}`, user: "alice", key: key})
		if w.Code != http.StatusCreated || w.Body.String() != `{"account":"1"}` {
			t.Fatalf("first, %s: %d %s", spelling, w.Code, w.Body)
		}
		w = do(r, req{path: "/accounts/1/withdraw", body: `{}`, user: "alice", key: key})
		if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" {
			t.Errorf("first spelled %s, retry spelled /accounts/1/withdraw: %d %s; want the replay", spelling, w.Code, w.Body)
		}
	}
}

// Used engine-wide, the middleware also runs for requests no route matches. Gin answers
// them after the chain returns ("404 page not found"), with a body the middleware never
// sees: nothing is stored, and a retry gets the same 404 as the first request.
func TestUnmatchedRouteNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	r.Use(ginlock.New(e.locks, payKey))
	key := idemKey(t)
	w1 := do(r, req{path: "/nope", body: `{}`, user: "u", key: key})
	w2 := do(r, req{path: "/nope", body: `{}`, user: "u", key: key})
	if w1.Code != http.StatusNotFound || w2.Code != http.StatusNotFound ||
		w2.Header().Get(ginlock.ReplayedHeader) != "" || w2.Body.String() != w1.Body.String() {
		t.Fatalf("first %d %q; retry %d %q replayed=%q; want two identical 404s, none replayed",
			w1.Code, w1.Body, w2.Code, w2.Body, w2.Header().Get(ginlock.ReplayedHeader))
	}

	// With a NoRoute handler after it, an unmatched request is locked (under the "~" route),
	// and its answer is not stored either.
	var ran atomic.Int64
	r.NoRoute(func(c *gin.Context) {
		if _, ok := ginlock.FromContext(c); !ok {
			t.Error("NoRoute handler ran without the lock")
		}
		c.String(http.StatusTeapot, "fallback %d", ran.Add(1))
	})
	w1 = do(r, req{path: "/nope", body: `{}`, user: "u", key: key})
	w2 = do(r, req{path: "/nope", body: `{}`, user: "u", key: key})
	if w1.Body.String() != "fallback 1" || w2.Body.String() != "fallback 2" || w2.Header().Get(ginlock.ReplayedHeader) != "" {
		t.Fatalf("NoRoute answers %d %q, %d %q: want the handler run twice, nothing replayed", w1.Code, w1.Body, w2.Code, w2.Body)
	}
	if w := do(r, req{path: "/nope", body: `{}`, user: "u"}); w.Code != http.StatusBadRequest {
		t.Fatalf("NoRoute handler, no Idempotency-Key: %d %s, want 400", w.Code, w.Body)
	}
}

// With ginlock on the whole engine and no handler after it, a request no route matches is
// answered by gin (404, or 405 with Allow): there is nothing to lock, and a 400 asking for
// an Idempotency-Key would send the client after a request that can never succeed.
func TestUnmatchedRouteAnsweredByGin(t *testing.T) {
	e := setup(t)
	r := router()
	r.HandleMethodNotAllowed = true
	r.Use(ginlock.New(e.locks, payKey))
	r.POST("/payments", func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"ok": 1}) })
	if w := do(r, req{path: "/no-such-route", user: "u"}); w.Code != http.StatusNotFound {
		t.Errorf("POST /no-such-route without a key: %d %s, want gin's 404", w.Code, w.Body)
	}
	if w := do(r, req{method: http.MethodGet, path: "/payments", user: "u"}); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" {
		t.Errorf("GET /payments (POST only) without a key: %d (Allow %q) %s, want gin's 405", w.Code, w.Header().Get("Allow"), w.Body)
	}
	if w := do(r, req{path: "/payments", body: `{}`, user: "u"}); w.Code != http.StatusBadRequest {
		t.Errorf("POST /payments without a key: %d %s, want 400", w.Code, w.Body)
	}
	if held := locktest.Held(t, e.rdb); len(held) != 0 {
		t.Errorf("locks left: %v", held)
	}
}

// A form-keyed lock reads the field where the handler does. A text/plain body is no form
// (ParseForm and c.ShouldBind leave it alone), so it cannot lock one account while the
// handler debits the one in the query; and a field in both the query and the body with
// different values (handlers differ in which they read) is a 400.
func TestFormKeyReadsWhatTheHandlerReads(t *testing.T) {
	e := setup(t)
	r := router()
	acctKey := keyfunc.MustTemplate("account:{a}", map[string]keyfunc.Part{"a": keyfunc.Form("account")})
	r.POST("/withdraw", ginlock.New(e.locks, acctKey), func(c *gin.Context) {
		var in struct {
			Account string `form:"account" binding:"required"`
		}
		if err := c.ShouldBind(&in); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		lk, _ := ginlock.FromContext(c)
		c.JSON(http.StatusOK, gin.H{"debited": in.Account, "lock": lk.Key()})
	})
	// FormValue reads the body's form even when its Content-Type has a parameter that does
	// not parse (ParseForm's error is ignored).
	r.POST("/withdraw-fv", ginlock.New(e.locks, acctKey), func(c *gin.Context) {
		lk, _ := ginlock.FromContext(c)
		c.JSON(http.StatusOK, gin.H{"debited": c.Request.FormValue("account"), "lock": lk.Key()})
	})
	send := func(target, contentType string, body []byte) *httptest.ResponseRecorder {
		rq := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		if contentType != "" {
			rq.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, rq)
		return w
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	_ = mw.WriteField("account", "8")
	_ = mw.Close()

	for _, tc := range []struct {
		name, target, contentType string
		body                      []byte
		code                      int
		want                      string // the account debited and locked, when 200
	}{
		{"urlencoded body", "/withdraw", "application/x-www-form-urlencoded", []byte("account=7"), 200, "7"},
		{"query", "/withdraw?account=7", "application/x-www-form-urlencoded", nil, 200, "7"},
		{"same in query and body", "/withdraw?account=7", "application/x-www-form-urlencoded", []byte("account=7"), 200, "7"},
		{"text/plain body is no form", "/withdraw?account=7", "text/plain", []byte("account=8"), 200, "7"},
		{"urlencoded body against query", "/withdraw?account=7", "application/x-www-form-urlencoded", []byte("account=8"), 400, ""},
		{"multipart body against query", "/withdraw?account=7", mw.FormDataContentType(), mp.Bytes(), 400, ""},
		{"untyped body is no form", "/withdraw?account=7", "", []byte("account=8"), 200, "7"},
		{"urlencoded with a bad parameter, body read", "/withdraw-fv", "application/x-www-form-urlencoded; charset", []byte("account=8"), 200, "8"},
		{"urlencoded with a bad parameter, against query", "/withdraw-fv?account=7", "application/x-www-form-urlencoded; charset", []byte("account=8"), 400, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := send(tc.target, tc.contentType, tc.body)
			if w.Code != tc.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tc.code)
			}
			if tc.code == http.StatusOK && (!strings.Contains(w.Body.String(), `"debited":"`+tc.want+`"`) ||
				!strings.Contains(w.Body.String(), `"lock":"account:`+tc.want+`"`)) {
				t.Errorf("answer %s: want account %s debited under its own lock", w.Body, tc.want)
			}
		})
	}
}

// A Go handler merges repeated JSON objects into one struct field: the second body below
// charges EUR, the first USD. The key that paid the first must not replay its answer to the
// second: 422, and the handler does not run again.
func TestRepeatedJSONMemberIsAnotherRequest(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		var in struct {
			P struct {
				Amount   int    `json:"amount"`
				Currency string `json:"currency"`
			} `json:"p"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.Status(http.StatusBadRequest)
			return
		}
		c.JSON(http.StatusCreated, gin.H{"charged": in.P.Amount, "currency": in.P.Currency})
	})
	key := idemKey(t)
	w1 := do(r, req{path: "/payments", user: "u", key: key, body: `{"p":{"amount":100}}`})
	w2 := do(r, req{path: "/payments", user: "u", key: key, body: `{"p":{"amount":100,"currency":"EUR"},"p":{"amount":100}}`})
	if w1.Code != http.StatusCreated || w2.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
		t.Fatalf("first %d %s; second (a handler reads EUR) %d %s replayed=%q, %d runs; want 422 after one run",
			w1.Code, w1.Body, w2.Code, w2.Body, w2.Header().Get(ginlock.ReplayedHeader), runs.Load())
	}
}
