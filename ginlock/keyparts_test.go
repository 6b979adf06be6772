package ginlock_test

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// The undeclared-parameter 500 goes by the parameter a Param part reads, not by the part's
// name: a Template placeholder named otherwise is the same server mistake.
func TestUndeclaredParamUnderTemplateName(t *testing.T) {
	e := setup(t)
	r := router()
	key := keyfunc.MustTemplate("account:{account}", map[string]keyfunc.Part{"account": keyfunc.Param("account_id")})
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, key), func(c *gin.Context) { c.Status(http.StatusOK) })
	w := do(r, req{path: "/accounts/7/withdraw"})
	if w.Code != http.StatusInternalServerError {
		t.Fatalf("key reads path parameter account_id, route declares only :id: status %d %s; want 500 as for an unnamed Param", w.Code, w.Body)
	}
}

// A From part that takes the order id from the path when the route has it, else from the
// query (one key for /orders/:id and /orders?id=): on /orders without ?id the client left the
// id out, a 400, though a part named "id" failed on a route without :id.
func TestFromFallbackMissingIsClientError(t *testing.T) {
	e := setup(t)
	r := router()
	id := keyfunc.From("id", func(s keyfunc.Source) (string, error) {
		if v, ok := s.Value(keyfunc.KindParam, "id"); ok {
			return v, nil
		}
		if v, ok := s.Value(keyfunc.KindQuery, "id"); ok {
			return v, nil
		}
		return "", keyfunc.ErrMissing
	})
	key := keyfunc.Join(keyfunc.Const("order"), id)
	h := func(c *gin.Context) { c.Status(http.StatusOK) }
	r.POST("/orders/:id", ginlock.New(e.locks, key), h)
	r.POST("/orders", ginlock.New(e.locks, key), h)
	if w := do(r, req{path: "/orders?id=9"}); w.Code != http.StatusOK {
		t.Fatalf("precondition: /orders?id=9: %d", w.Code)
	}
	w := do(r, req{path: "/orders"})
	if w.Code != http.StatusBadRequest {
		t.Fatalf("/orders without ?id (client's mistake): status %d %s; want 400 naming part id", w.Code, w.Body)
	}
}

// A key with an Optional Idempotency-Key: a request without the header is locked under "~"
// with the caller's other keyless requests; when that lock is busy the 409 is a busy lock,
// not ErrKeyInProgress, since this request sent no Idempotency-Key.
func TestKeylessBusyIsNotKeyInProgress(t *testing.T) {
	e := setup(t)
	optKey := keyfunc.Join(keyfunc.IdempotencyKey().Optional()).Scope(keyfunc.ContextValue(userKey{}).Named("user"))
	r := router()
	started, release := make(chan struct{}, 1), make(chan struct{})
	var cause atomic.Value
	r.POST("/payments", ginlock.New(e.locks, optKey, ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
		cause.Store(err)
		ginlock.DefaultErrorHandler(c, status, err)
	})), func(c *gin.Context) {
		started <- struct{}{}
		<-release
		c.Status(http.StatusCreated)
	})
	done := make(chan int)
	go func() { done <- do(r, req{path: "/payments", user: "alice"}).Code }()
	<-started
	w := do(r, req{path: "/payments", user: "alice"})
	close(release)
	<-done
	p := wantProblem(t, w, http.StatusConflict)
	err, _ := cause.Load().(error)
	if errors.Is(err, ginlock.ErrKeyInProgress) || strings.Contains(p.Detail, "Idempotency-Key") {
		t.Fatalf("request without Idempotency-Key: cause %v (ErrKeyInProgress=%v), detail %q; want dlock.ErrNotObtained alone",
			err, errors.Is(err, ginlock.ErrKeyInProgress), p.Detail)
	}
	if !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("cause %v", err)
	}
}

// keyfunc.Header(IdempotencyKeyHeader) keeps the first line of a repeated header, as
// documented; only IdempotencyKey refuses two lines.
func TestHeaderPartKeepsFirstValue(t *testing.T) {
	f := keyfunc.Join(keyfunc.Header(keyfunc.IdempotencyKeyHeader))
	r := httptestRequest()
	r.Header.Add(keyfunc.IdempotencyKeyHeader, "k1")
	r.Header.Add(keyfunc.IdempotencyKeyHeader, "k2")
	key, err := keyOf(t, f, "/p", r, 0)
	if err != nil || key != "k1" {
		t.Fatalf("Header(Idempotency-Key) with lines k1, k2: key %q, %v; want %q (first value, as documented)", key, err, "k1")
	}
}

func httptestRequest() *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://x/p", nil)
	return r
}

// A handler that parses the account id as a number debits account 42 for /accounts/42,
// /accounts/042 and /accounts/+42: with Integer the three share the account's lock (409
// while one runs), and an id that is no integer is the client's 400 before the handler.
func TestIntegerParamSpellingsShareLock(t *testing.T) {
	e := setup(t)
	key := keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id").Integer()})
	r := router()
	started, release := make(chan struct{}, 1), make(chan struct{})
	var runs atomic.Int32
	r.POST("/accounts/:id/withdraw", ginlock.New(e.locks, key, ginlock.WithoutReplay()), func(c *gin.Context) {
		runs.Add(1)
		started <- struct{}{}
		<-release
		c.Status(http.StatusOK)
	})
	done := make(chan int)
	go func() { done <- do(r, req{path: "/accounts/42/withdraw"}).Code }()
	<-started
	for _, other := range []string{"042", "+42", "0042"} {
		wantProblem(t, do(r, req{path: "/accounts/" + other + "/withdraw"}), http.StatusConflict)
	}
	p := wantProblem(t, do(r, req{path: "/accounts/4x2/withdraw"}), http.StatusBadRequest)
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("first withdrawal: %d", code)
	}
	if p.Part != "id" {
		t.Errorf("400 for /accounts/4x2 names part %q, want id", p.Part)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1: the other spellings of account 42 got past its lock", n)
	}
}
