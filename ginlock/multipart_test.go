package ginlock_test

import (
	"bytes"
	"mime/multipart"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// form encodes fields as multipart/form-data with a fresh random boundary, as browsers,
// curl -F and multipart.Writer do for each encoding.
func form(t *testing.T, fields ...string) (contentType, body string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), buf.String()
}

// A client that retries a multipart form with the same Idempotency-Key encodes it again,
// with a new boundary: the retry is the same request and gets the stored response, while a
// form with another value is refused with 422.
func TestMultipartRetryIsReplayed(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"amount": c.PostForm("amount")})
	})
	key := idemKey(t)
	send := func(fields ...string) *httpResult {
		ct, body := form(t, fields...)
		w := do(r, req{path: "/payments", user: "alice", key: key, body: body, header: map[string]string{"Content-Type": ct}})
		return &httpResult{w.Code, w.Body.String(), w.Header().Get(ginlock.ReplayedHeader)}
	}
	if got := send("amount", "100"); got.code != http.StatusCreated || got.body != `{"amount":"100"}` {
		t.Fatalf("first: %+v", got)
	}
	if got := send("amount", "100"); got.code != http.StatusCreated || got.body != `{"amount":"100"}` || got.replayed != "true" || runs.Load() != 1 {
		t.Fatalf("retry, the form encoded again: %+v after %d runs; want the stored 201 replayed", got, runs.Load())
	}
	if got := send("amount", "200"); got.code != http.StatusUnprocessableEntity || runs.Load() != 1 {
		t.Fatalf("same key, another amount: %+v after %d runs; want 422", got, runs.Load())
	}
}

type httpResult struct {
	code           int
	body, replayed string
}
