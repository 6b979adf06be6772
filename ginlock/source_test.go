package ginlock_test

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// keyOf derives f's key for a request to route (registered as pattern) inside Gin.
func keyOf(t *testing.T, f *keyfunc.Func, pattern string, r *http.Request, maxBody int64) (string, error) {
	t.Helper()
	var key string
	var err error
	e := gin.New()
	e.Use(func(c *gin.Context) { c.Set("tenant", "t-9"); c.Next() })
	e.Any(pattern, func(c *gin.Context) { key, err = f.Key(ginlock.NewSource(c, maxBody)) })
	e.ServeHTTP(httptest.NewRecorder(), r)
	return key, err
}

func TestSourceValues(t *testing.T) {
	f := keyfunc.Join(keyfunc.Meta(keyfunc.MetaMethod), keyfunc.Meta(keyfunc.MetaRoute), keyfunc.Meta(keyfunc.MetaPath),
		keyfunc.Param("id"), keyfunc.Query("q"), keyfunc.Header("X-Req"), keyfunc.ContextValue("tenant"),
		keyfunc.Form("amount"))
	r := httptest.NewRequest(http.MethodPut, "/items/7?q=a&q=b", strings.NewReader("amount=12&amount=13"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Add("X-Req", "r1")
	r.Header.Add("X-Req", "r2")
	key, err := keyOf(t, f, "/items/:id", r, 0)
	if want := "PUT:%2Fitems%2F%3Aid:%2Fitems%2F7:7:a:r1:t-9:12"; key != want || err != nil {
		t.Fatalf("key %q, %v; want %q", key, err, want)
	}

	_, err = keyOf(t, keyfunc.Join(keyfunc.Query("missing")), "/items/:id", httptest.NewRequest("GET", "/items/1", nil), 0)
	var pe *keyfunc.PartError
	if !errors.As(err, &pe) || pe.Part != "missing" || !errors.Is(err, keyfunc.ErrMissing) {
		t.Fatalf("err %v, want a missing part error", err)
	}
}

func TestSourceMultipartForm(t *testing.T) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("order", "o-5")
	fw, _ := mw.CreateFormFile("order", "order.txt") // a file of the same name is ignored
	_, _ = fw.Write([]byte("file"))
	_ = mw.Close()
	r := httptest.NewRequest(http.MethodPost, "/upload", &body)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	key, err := keyOf(t, keyfunc.Join(keyfunc.Form("order")), "/upload", r, 0)
	if key != "o-5" || err != nil {
		t.Fatalf("key %q, %v; want o-5", key, err)
	}
}

func TestSourceBodyCap(t *testing.T) {
	f := keyfunc.Join(keyfunc.BodyHash())
	for _, tc := range []struct {
		name          string
		body          string
		contentLength int64 // -1: unknown
		tooLarge      bool
	}{
		{"at the cap", "0123456789", 10, false},
		{"over the cap, length known", "0123456789x", 11, true},
		{"over the cap, length unknown", "0123456789x", -1, true},
		{"empty", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/b", io.NopCloser(strings.NewReader(tc.body)))
			r.ContentLength = tc.contentLength
			_, err := keyOf(t, f, "/b", r, 10)
			if got := errors.Is(err, keyfunc.ErrBodyTooLarge); got != tc.tooLarge || (err != nil && !tc.tooLarge) {
				t.Fatalf("err %v, want too large: %v", err, tc.tooLarge)
			}
		})
	}
}

// The body read for the key and the fingerprint is there again for the handler, both as
// c.Request.Body and for ShouldBindBodyWith.
func TestBodyRestored(t *testing.T) {
	e := setup(t)
	r := router()
	body := `{"order":{"id":"o-1"},"amount":5}`
	r.POST("/orders", ginlock.New(e.locks, orderKey, ginlock.WithReplay(0)), func(c *gin.Context) {
		var v struct {
			Amount int `json:"amount"`
		}
		if err := c.ShouldBindBodyWithJSON(&v); err != nil || v.Amount != 5 {
			c.String(http.StatusInternalServerError, "bind: %v %v", v, err)
			return
		}
		raw, err := io.ReadAll(c.Request.Body)
		if err != nil || string(raw) != body {
			c.String(http.StatusInternalServerError, "body %q %v", raw, err)
			return
		}
		c.String(http.StatusOK, "ok")
	})
	if w := do(r, req{path: "/orders", user: "alice", body: body}); w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	// WithReplay without an Idempotency-Key: the same order again is a replay.
	if w := do(r, req{path: "/orders", user: "alice", body: body}); w.Header().Get(ginlock.ReplayedHeader) != "true" {
		t.Fatalf("second submit: %d %v, want a replay", w.Code, w.Header())
	}
}

// Values gives every line of a header, and for the other kinds the one value Value gives (a
// part that reads all values, such as IdempotencyKey's check for a key sent twice, works on
// any kind); nothing for an absent one.
func TestSourceValuesOfEachKind(t *testing.T) {
	var got map[string][]string
	e := gin.New()
	e.POST("/items/:id", func(c *gin.Context) {
		s := ginlock.NewSource(c, 0)
		got = map[string][]string{
			"header": s.Values(keyfunc.KindHeader, "X-Req"),
			"param":  s.Values(keyfunc.KindParam, "id"),
			"query":  s.Values(keyfunc.KindQuery, "q"),
			"meta":   s.Values(keyfunc.KindMeta, keyfunc.MetaMethod),
			"absent": s.Values(keyfunc.KindQuery, "nope"),
		}
	})
	r := httptest.NewRequest(http.MethodPost, "/items/7?q=a&q=b", nil)
	r.Header.Add("X-Req", "r1")
	r.Header.Add("X-Req", "r2")
	e.ServeHTTP(httptest.NewRecorder(), r)
	want := map[string][]string{"header": {"r1", "r2"}, "param": {"7"}, "query": {"a"}, "meta": {"POST"}, "absent": nil}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("Values %s = %q, want %q", k, got[k], w)
		}
	}
}
