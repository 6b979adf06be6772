package ginlock_test

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// formAccountKey locks the account named by the form field "account".
var formAccountKey = keyfunc.MustTemplate("account:{a}", map[string]keyfunc.Part{"a": keyfunc.Form("account")})

// sendForm posts body with contentType to path; chunked sends it without a Content-Length.
func sendForm(h http.Handler, path, contentType, body string, chunked bool, header map[string]string) *httptest.ResponseRecorder {
	var rd io.Reader = strings.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // hides the length from httptest.NewRequest
	}
	r := httptest.NewRequest(http.MethodPost, path, rd)
	if chunked {
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
	}
	r.Header.Set("Content-Type", contentType)
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A multipart form over WithMaxBody is refused with 413 before the handler runs, whether it
// announces its length or not, and whatever the key falls back to (an optional field, the
// same field in the query): the handler never gets a body cut at the cap.
func TestMultipartOverCapIs413(t *testing.T) {
	e := setup(t)
	ct, body := form(t, "account", "7", "note", strings.Repeat("x", 400))
	cases := []struct {
		name    string
		key     *keyfunc.Func
		path    string
		chunked bool
	}{
		{"with Content-Length", formAccountKey, "/pay", false},
		{"chunked", formAccountKey, "/pay", true},
		{"chunked, field also in the query", formAccountKey, "/pay?account=7", true},
		{"chunked, optional field", keyfunc.Join(keyfunc.Form("account").Optional()), "/pay", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := router()
			var ran atomic.Bool
			var cause error
			onError := ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
				cause = err
				ginlock.DefaultErrorHandler(c, status, err)
			})
			r.POST("/pay", ginlock.New(e.locks, tc.key, ginlock.WithoutReplay(), ginlock.WithMaxBody(128), onError), func(c *gin.Context) {
				ran.Store(true)
				c.String(http.StatusOK, "handler ran")
			})
			w := sendForm(r, tc.path, ct, body, tc.chunked, nil)
			wantProblem(t, w, http.StatusRequestEntityTooLarge)
			if !errors.Is(cause, keyfunc.ErrBodyTooLarge) {
				t.Fatalf("error handler got %v, want an error matching keyfunc.ErrBodyTooLarge", cause)
			}
			if ran.Load() {
				t.Fatal("the handler ran on a body over the cap")
			}
		})
	}
}

// A form parsed before ginlock, by a middleware calling c.PostForm (a CSRF check, a method
// override) or by one wrapping the engine calling r.FormValue, has had its body read to its
// end by net/http: the key's form fields come from that parse, as the handler sees them.
func TestFormParsedBeforeGinlockGivesTheKey(t *testing.T) {
	e := setup(t)
	csrf := func(c *gin.Context) { _ = c.PostForm("csrf"); c.Next() }
	r := router()
	r.POST("/pay", csrf, ginlock.New(e.locks, formAccountKey, ginlock.WithoutReplay()), func(c *gin.Context) {
		lk, ok := dlock.FromContext(c.Request.Context())
		if !ok {
			c.String(http.StatusInternalServerError, "no lock")
			return
		}
		c.String(http.StatusOK, lk.Key()+" amount="+c.PostForm("amount"))
	})
	mct, mbody := form(t, "csrf", "tok", "account", "7", "amount", "5")
	for _, tc := range []struct{ name, ct, body string }{
		{"urlencoded", "application/x-www-form-urlencoded", "csrf=tok&account=7&amount=5"},
		{"multipart", mct, mbody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := sendForm(r, "/pay", tc.ct, tc.body, false, nil)
			if w.Code != http.StatusOK || w.Body.String() != "account:7 amount=5" {
				t.Fatalf("got %d %q; want 200 %q", w.Code, w.Body, "account:7 amount=5")
			}
		})
	}
}

// multipartFile encodes one field and one file as multipart/form-data.
func multipartFile(t *testing.T, field, value, file, content string) (contentType, body string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if err := mw.WriteField(field, value); err != nil {
		t.Fatal(err)
	}
	fw, err := mw.CreateFormFile("receipt", file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(fw, content); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), buf.String()
}

// With the form parsed before ginlock, the replay fingerprint still covers what the handler
// reads: a retry of the same form gets the stored answer; the same Idempotency-Key with
// another field value, or another uploaded file, gets 422 rather than the answer stored for
// the first payload.
func TestReplayFingerprintOfFormParsedBefore(t *testing.T) {
	e := setup(t)
	parse := func(c *gin.Context) { _ = c.PostForm("csrf"); c.Next() }
	r := router()
	var runs atomic.Int32
	r.POST("/pay", parse, ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.String(http.StatusCreated, "paid "+c.PostForm("amount"))
	})
	type payload struct{ ct, body string }
	urlencoded := func(amount string) payload {
		return payload{"application/x-www-form-urlencoded", url.Values{"csrf": {"tok"}, "amount": {amount}}.Encode()}
	}
	withFile := func(amount, content string) payload {
		ct, body := multipartFile(t, "amount", amount, "r.txt", content)
		return payload{ct, body}
	}
	cases := []struct {
		name           string
		first, another payload
	}{
		{"urlencoded: another amount", urlencoded("100"), urlencoded("999999")},
		{"multipart: another amount", withFile("100", "receipt A"), withFile("999999", "receipt A")},
		{"multipart: another file", withFile("100", "receipt A"), withFile("100", "receipt B")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs.Store(0)
			key := idemKey(t)
			hdr := map[string]string{"X-User": "alice", keyfunc.IdempotencyKeyHeader: key}
			w := sendForm(r, "/pay", tc.first.ct, tc.first.body, false, hdr)
			if w.Code != http.StatusCreated || w.Body.String() != "paid 100" {
				t.Fatalf("first: %d %q", w.Code, w.Body)
			}
			w = sendForm(r, "/pay", tc.first.ct, tc.first.body, false, hdr)
			if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
				t.Fatalf("retry of the same form: %d %q replayed=%q after %d runs; want the stored 201",
					w.Code, w.Body, w.Header().Get(ginlock.ReplayedHeader), runs.Load())
			}
			w = sendForm(r, "/pay", tc.another.ct, tc.another.body, false, hdr)
			if w.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
				t.Fatalf("same key, other payload: %d %q after %d runs; want 422", w.Code, w.Body, runs.Load())
			}
		})
	}
}

// A form parsed before ginlock counts against WithMaxBody like the body it came from.
func TestFormParsedBeforeOverCapIs413(t *testing.T) {
	e := setup(t)
	parse := func(c *gin.Context) { _ = c.PostForm("csrf"); c.Next() }
	r := router()
	var ran atomic.Bool
	r.POST("/pay", parse, ginlock.New(e.locks, payKey, ginlock.WithMaxBody(64)), func(c *gin.Context) {
		ran.Store(true)
	})
	ct, body := multipartFile(t, "amount", "100", "r.txt", strings.Repeat("y", 200))
	w := sendForm(r, "/pay", ct, body, false, map[string]string{"X-User": "alice", keyfunc.IdempotencyKeyHeader: idemKey(t)})
	wantProblem(t, w, http.StatusRequestEntityTooLarge)
	if ran.Load() {
		t.Fatal("the handler ran")
	}
}

// A form parse that failed before ginlock (over an http.MaxBytesReader limit set earlier)
// leaves c.Request.PostForm empty: ginlock reads the body, which fails again, and answers
// 413 without running the handler, whatever the key reads.
func TestFailedFormParseBeforeGinlockIs413(t *testing.T) {
	e := setup(t)
	limit := func(c *gin.Context) { c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 32); c.Next() }
	csrf := func(c *gin.Context) { _ = c.PostForm("csrf"); c.Next() }
	body := url.Values{"csrf": {"tok"}, "account": {"7"}, "amount": {"100"}, "note": {strings.Repeat("x", 200)}}.Encode()
	for _, tc := range []struct {
		name string
		key  *keyfunc.Func
	}{{"key from a form field", formAccountKey}, {"key from Idempotency-Key", payKey}} {
		t.Run(tc.name, func(t *testing.T) {
			r := router()
			var ran atomic.Bool
			r.POST("/pay", limit, csrf, ginlock.New(e.locks, tc.key), func(c *gin.Context) { ran.Store(true) })
			w := sendForm(r, "/pay", "application/x-www-form-urlencoded", body, false,
				map[string]string{"X-User": "alice", keyfunc.IdempotencyKeyHeader: idemKey(t)})
			wantProblem(t, w, http.StatusRequestEntityTooLarge)
			if ran.Load() {
				t.Fatal("the handler ran")
			}
		})
	}
}

// A method override around the engine (r.FormValue("_method")) turns a POSTed form into a
// DELETE: net/http read the body for the override, and the handler reads the fields from
// the parse. The fingerprint covers them all the same: the same Idempotency-Key with another
// payload gets 422, not the answer stored for the first.
func TestMethodOverrideFormFingerprint(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.DELETE("/items/:id", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.String(http.StatusOK, "deleted %s refund=%s", c.Param("id"), c.PostForm("refund"))
	})
	override := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if m := req.FormValue("_method"); req.Method == http.MethodPost && m != "" {
			req.Method = strings.ToUpper(m)
		}
		r.ServeHTTP(w, req)
	})
	hdr := map[string]string{"X-User": "alice", keyfunc.IdempotencyKeyHeader: idemKey(t)}
	ct := "application/x-www-form-urlencoded"
	if w := sendForm(override, "/items/9", ct, "_method=DELETE&refund=yes", false, hdr); w.Code != http.StatusOK || w.Body.String() != "deleted 9 refund=yes" {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	if w := sendForm(override, "/items/9", ct, "_method=DELETE&refund=yes", false, hdr); w.Header().Get(ginlock.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("retry: %d %q after %d runs; want the stored answer", w.Code, w.Body, runs.Load())
	}
	if w := sendForm(override, "/items/9", ct, "_method=DELETE&refund=no", false, hdr); w.Code != http.StatusUnprocessableEntity || runs.Load() != 1 {
		t.Fatalf("same key, another payload: %d %q after %d runs; want 422", w.Code, w.Body, runs.Load())
	}
}
