package ginlock_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// orderKey locks one order of one user, from a JSON body field.
var orderKey = keyfunc.MustTemplate("order:{order}", map[string]keyfunc.Part{"order": keyfunc.JSON("order.id")}).
	Scope(keyfunc.ContextValue(userKey{}).Named("user"))

func TestRejections(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	h := func(c *gin.Context) { runs.Add(1); c.Status(http.StatusOK) }
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithMaxBody(64)), h)
	r.POST("/orders", ginlock.New(e.locks, orderKey, ginlock.WithMaxBody(64)), h)

	big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
	for _, tc := range []struct {
		name   string
		q      req
		status int
		part   string
		secret string // a value of the request that the answer must not show
	}{
		{"missing Idempotency-Key", req{path: "/payments", user: "alice"}, 400, "Idempotency-Key", ""},
		{"empty Idempotency-Key", req{path: "/payments", user: "alice", header: map[string]string{keyfunc.IdempotencyKeyHeader: " "}}, 400, "Idempotency-Key", ""},
		{"missing user", req{path: "/payments", key: "k1"}, 400, "user", "k1"},
		{"Idempotency-Key too long", req{path: "/payments", user: "alice", key: strings.Repeat("k", 256)}, 400, "Idempotency-Key", strings.Repeat("k", 256)},
		{"Idempotency-Key with control bytes", req{path: "/payments", user: "alice", key: "k\x01y"}, 400, "Idempotency-Key", "k\x01y"},
		{"Idempotency-Key bad sf-string", req{path: "/payments", user: "alice", key: `"open`}, 400, "Idempotency-Key", "open"},
		{"malformed JSON for a required field", req{path: "/orders", user: "alice", body: `{"order":`}, 400, "order", ""},
		{"missing body field", req{path: "/orders", user: "alice", body: `{"order":{}}`}, 400, "order", ""},
		{"number out of range", req{path: "/orders", user: "alice", body: `{"order":{"id":1e99999999999}}`}, 400, "order", "99999999999"},
		{"body over the cap for the key", req{path: "/orders", user: "alice", body: big}, 413, "order", "xxxx"},
		{"body over the cap for the fingerprint", req{path: "/payments", user: "alice", key: "k2", body: big}, 413, "body", "xxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := do(r, tc.q)
			p := wantProblem(t, w, tc.status)
			if p.Part != tc.part || !strings.Contains(p.Detail, tc.part) {
				t.Fatalf("problem %+v, want it to name part %q", p, tc.part)
			}
			if tc.secret != "" && strings.Contains(w.Body.String(), tc.secret) {
				t.Fatalf("the answer shows the request's value %q: %s", tc.secret, w.Body)
			}
		})
	}
	if runs.Load() != 0 {
		t.Fatalf("handler ran %d times for rejected requests", runs.Load())
	}
	if keys := e.redisKeys(t, "*"); len(keys) != 0 {
		t.Fatalf("rejected requests touched Redis: %v", keys)
	}
}

// An auth step that stores the user unconditionally (c.Set("user", c.GetHeader("X-User")), as
// in ExampleNew) stores "" for a request without a user. That is no user: the request is a
// 400 naming the user part, and two anonymous clients with the same Idempotency-Key never share
// a scope (the second would be replayed the first one's payment).
func TestEmptyUserIsMissing(t *testing.T) {
	e := setup(t)
	var runs atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")) })
	key := keyfunc.Join(keyfunc.IdempotencyKey()).Scope(keyfunc.ContextValue("user").Named("user"))
	r.POST("/payments", ginlock.New(e.locks, key), func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"payment": runs.Load()})
	})
	for _, user := range []string{"", " \t"} {
		for range 2 {
			q := req{path: "/payments", key: "same-key", header: map[string]string{"X-User": user}}
			if p := wantProblem(t, do(r, q), http.StatusBadRequest); p.Part != "user" {
				t.Fatalf("user %q: problem %+v, want it to name part user", user, p)
			}
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("handler ran %d times for requests without a user", runs.Load())
	}
	if keys := e.redisKeys(t, "*"); len(keys) != 0 {
		t.Fatalf("requests without a user touched Redis: %v", keys)
	}
	if w := do(r, req{path: "/payments", user: "alice", key: "same-key"}); w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("a request with a user: %d, handler ran %d times", w.Code, runs.Load())
	}
}

// An auth step that stores a user of a type ContextValue cannot read is the server's mistake:
// 500, the handler never runs, Redis is untouched, and the answer names nothing of the value.
func TestUnsupportedUserTypeIsServerError(t *testing.T) {
	e := setup(t)
	var runs atomic.Int32
	r := gin.New()
	type account struct{ ID int }
	r.Use(func(c *gin.Context) { c.Set("user", account{ID: 7}) })
	key := keyfunc.Join(keyfunc.IdempotencyKey()).Scope(keyfunc.ContextValue("user").Named("user"))
	r.POST("/payments", ginlock.New(e.locks, key), func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusCreated)
	})
	p := wantProblem(t, do(r, req{path: "/payments", key: "k1"}), http.StatusInternalServerError)
	if strings.Contains(p.Detail, "account") || p.Part != "" {
		t.Errorf("500 problem %+v tells the client about the server's context value", p)
	}
	if runs.Load() != 0 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	if keys := e.redisKeys(t, "*"); len(keys) != 0 {
		t.Fatalf("the request touched Redis: %v", keys)
	}
}

// A user the auth step put in the context that is over the part cap (a token's subject
// copied unchecked) is the server's problem too: 500, not a 400 that blames the client, and
// the handler never runs.
func TestOverlongUserIsServerError(t *testing.T) {
	e := setup(t)
	var runs atomic.Int32
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusCreated)
	})
	user := strings.Repeat("u", keyfunc.DefaultMaxLen+1)
	p := wantProblem(t, do(r, req{path: "/payments", user: user, key: idemKey(t)}), http.StatusInternalServerError)
	if strings.Contains(p.Detail, "uuu") || p.Part != "" || runs.Load() != 0 {
		t.Fatalf("500 problem %+v after %d handler runs; want a detail that says nothing of the value, no run", p, runs.Load())
	}
}

// Where the request body cannot be had, the status says whose fault it is: over a cap that
// an earlier middleware set (http.MaxBytesReader) is 413, a body cut short is 400, and a From
// function that fails is the server's 500, logged, with nothing of its error in the answer.
func TestKeyFailureStatuses(t *testing.T) {
	e := setup(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tenant := keyfunc.From("tenant", func(keyfunc.Source) (string, error) {
		return "", errors.New("pq: connection refused to 10.0.0.5:5432")
	})
	var runs atomic.Int32
	h := func(c *gin.Context) { runs.Add(1); c.Status(http.StatusCreated) }
	limit := func(c *gin.Context) {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 8)
		c.Next()
	}
	r := router()
	r.POST("/limited", limit, ginlock.New(e.locks, payKey), h)
	r.POST("/payments", ginlock.New(e.locks, payKey), h)
	r.POST("/tenant", ginlock.New(e.locks, keyfunc.Join(tenant), ginlock.WithLogger(log)), h)

	p := wantProblem(t, do(r, req{path: "/limited", body: `{"amount":100000}`, user: "alice", key: "k1"}),
		http.StatusRequestEntityTooLarge)
	if !strings.Contains(p.Detail, "8 bytes") {
		t.Fatalf("413 detail %q, want the limit of 8 bytes", p.Detail)
	}

	cut := httptest.NewRequest(http.MethodPost, "/payments", io.MultiReader(strings.NewReader(`{"amo`),
		failingReader{err: io.ErrUnexpectedEOF}))
	cut.Header.Set("X-User", "alice")
	cut.Header.Set(keyfunc.IdempotencyKeyHeader, "k2")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, cut)
	if p := wantProblem(t, w, http.StatusBadRequest); !strings.Contains(p.Detail, "could not be read") {
		t.Fatalf("400 detail %q", p.Detail)
	}

	w = do(r, req{path: "/tenant"})
	p = wantProblem(t, w, http.StatusInternalServerError)
	if strings.Contains(w.Body.String(), "10.0.0.5") || p.Part != "" {
		t.Fatalf("500 body %s: it must not show the function's error nor blame a request part", w.Body)
	}
	if !strings.Contains(logs.String(), "10.0.0.5") {
		t.Fatalf("the function's error was not logged: %q", logs.String())
	}
	if runs.Load() != 0 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

// failingReader is a reader that fails with err.
type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestRedisDown(t *testing.T) {
	e := setupRedis(t, func(o *redis.Options) { o.MaxRetries = -1 }) // fail fast once stopped
	var logs bytes.Buffer
	r := router()
	var runs atomic.Int32
	h := func(c *gin.Context) { runs.Add(1); c.Status(http.StatusCreated) }
	r.POST("/closed", ginlock.New(e.locks, payKey), h)
	r.POST("/open", ginlock.New(e.locks, payKey, ginlock.WithFailOpen(),
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))), h)
	if err := e.srv.Stop(); err != nil {
		t.Fatal(err)
	}

	w := do(r, req{path: "/closed", user: "alice", key: idemKey(t)})
	wantProblem(t, w, http.StatusServiceUnavailable)
	if w.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if strings.Contains(w.Body.String(), e.srv.Addr()) {
		t.Errorf("problem body leaks the Redis error: %s", w.Body)
	}
	if runs.Load() != 0 {
		t.Fatal("handler ran while failing closed")
	}

	if w := do(r, req{path: "/open", user: "alice", key: idemKey(t)}); w.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("fail-open: %d after %d runs, want 201 after 1", w.Code, runs.Load())
	}
	if !strings.Contains(logs.String(), "fail-open") {
		t.Fatalf("fail-open not logged: %q", logs.String())
	}
}

func TestErrorHandler(t *testing.T) {
	e := setup(t)
	r := router()
	type seen struct {
		status int
		err    error
	}
	var got seen
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
		got = seen{status, err}
		c.JSON(status, gin.H{"error": "nope"})
	})), func(c *gin.Context) { c.Status(http.StatusOK) })
	w := do(r, req{path: "/payments", user: "alice"})
	var pe *keyfunc.PartError
	if w.Code != http.StatusBadRequest || w.Body.String() != `{"error":"nope"}` || got.status != 400 ||
		!errors.As(got.err, &pe) || !errors.Is(got.err, keyfunc.ErrMissing) {
		t.Fatalf("got %d %s, handler saw %+v", w.Code, w.Body, got)
	}

	// Mismatch reaches the handler as ErrMismatch.
	key := idemKey(t)
	do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":1}`})
	do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":2}`})
	if got.status != http.StatusUnprocessableEntity || !errors.Is(got.err, ginlock.ErrMismatch) {
		t.Fatalf("handler saw %+v, want 422 ErrMismatch", got)
	}

	// A duplicate while the first runs: ErrKeyInProgress, which matches dlock.ErrNotObtained.
	started, finish := make(chan struct{}), make(chan struct{})
	r.POST("/slow", ginlock.New(e.locks, payKey, ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
		got = seen{status, err}
		c.Status(status)
	})), func(c *gin.Context) {
		close(started)
		<-finish
		c.Status(http.StatusOK)
	})
	key = idemKey(t)
	first := make(chan int)
	go func() { first <- do(r, req{path: "/slow", user: "alice", key: key}).Code }()
	<-started
	w = do(r, req{path: "/slow", user: "alice", key: key})
	close(finish)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if w.Code != http.StatusConflict || !errors.Is(got.err, ginlock.ErrKeyInProgress) || !errors.Is(got.err, dlock.ErrNotObtained) {
		t.Fatalf("duplicate in progress: %d, handler saw %+v; want 409 ErrKeyInProgress matching dlock.ErrNotObtained", w.Code, got)
	}
}

// A middleware before ginlock that sets an API-wide Content-Type does not relabel ginlock's
// own answers: they stay application/problem+json.
func TestProblemContentTypeOverridesDefault(t *testing.T) {
	e := setup(t)
	r := router()
	r.Use(func(c *gin.Context) { c.Header("Content-Type", "application/json; charset=utf-8"); c.Next() })
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"ok": 1}) })
	w := do(r, req{path: "/payments", user: "alice"})
	if w.Code != http.StatusBadRequest || w.Header().Get("Content-Type") != ginlock.ProblemContentType {
		t.Fatalf("no Idempotency-Key: %d, Content-Type %q; want 400 as %s", w.Code, w.Header().Get("Content-Type"), ginlock.ProblemContentType)
	}
	w = do(r, req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)})
	if w.Code != http.StatusCreated || w.Header().Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("handler's answer: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
}

func TestNewPanicsOnNil(t *testing.T) {
	e := setup(t)
	for name, f := range map[string]func(){
		"client": func() { ginlock.New(nil, payKey) },
		"key":    func() { ginlock.New(e.locks, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "nil") {
					t.Fatalf("recovered %q, want a panic naming the nil argument", msg)
				}
			}()
			f()
		})
	}
}

func TestClosedClient(t *testing.T) {
	e := setup(t)
	r := router()
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) { c.Status(http.StatusOK) })
	_ = e.locks.Close()
	w := do(r, req{path: "/payments", user: "alice", key: idemKey(t)})
	wantProblem(t, w, http.StatusServiceUnavailable)
}

// Idempotency-Key sent on two header lines is two keys: 400, and the handler does not run.
// (Using the first line would let a client that meant the second get another request's
// response.)
func TestRepeatedIdempotencyKeyHeader(t *testing.T) {
	e := setup(t)
	r := router()
	var ran atomic.Bool
	r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) { ran.Store(true) })
	q := httptest.NewRequest(http.MethodPost, "/payments", nil)
	q.Header.Set("X-User", "alice")
	q.Header.Add(keyfunc.IdempotencyKeyHeader, idemKey(t))
	q.Header.Add(keyfunc.IdempotencyKeyHeader, idemKey(t)+"-2")
	w := httptest.NewRecorder()
	r.ServeHTTP(w, q)
	if p := wantProblem(t, w, http.StatusBadRequest); !strings.Contains(p.Detail, "more than one key") {
		t.Errorf("detail %q", p.Detail)
	}
	if ran.Load() {
		t.Fatal("the handler ran with two Idempotency-Keys")
	}
}

// A key that reads a path parameter the route does not declare is the server's mistake: 500
// (and a log line naming the parameter and route), not a 400 blaming the client. An Optional
// parameter that a route lacks is simply absent.
func TestUndeclaredPathParameter(t *testing.T) {
	e := setup(t)
	r := router()
	var logs bytes.Buffer
	var ran atomic.Int32
	handler := func(c *gin.Context) { ran.Add(1); c.Status(http.StatusOK) }
	var cause error
	r.POST("/a/:account_id/w", ginlock.New(e.locks, accountKey,
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
			cause = err
			ginlock.DefaultErrorHandler(c, status, err)
		})), handler)
	w := do(r, req{path: "/a/7/w"})
	wantProblem(t, w, http.StatusInternalServerError)
	if !errors.Is(cause, ginlock.ErrUndeclaredParam) || keyfunc.IsInputError(cause) {
		t.Errorf("error handler got %v; want ginlock.ErrUndeclaredParam, not an input error", cause)
	}
	if ran.Load() != 0 {
		t.Fatal("the handler ran without its lock")
	}
	if !strings.Contains(logs.String(), `parameter \"id\"`) || !strings.Contains(logs.String(), "/a/:account_id/w") {
		t.Errorf("log does not name the parameter and route: %s", logs.String())
	}

	optional := keyfunc.Join(keyfunc.Const("acct"), keyfunc.Param("id").Optional())
	r.POST("/b/w", ginlock.New(e.locks, optional), handler)
	if w := do(r, req{path: "/b/w"}); w.Code != http.StatusOK {
		t.Fatalf("optional parameter the route lacks: %d %s", w.Code, w.Body)
	}
	// A declared parameter still works.
	r.POST("/c/:id/w", ginlock.New(e.locks, accountKey), handler)
	if w := do(r, req{path: "/c/7/w"}); w.Code != http.StatusOK {
		t.Fatalf("declared parameter: %d %s", w.Code, w.Body)
	}
}

// An error handler that only logs, writing nothing, still answers with the middleware's
// status: not gin's default 200, which would tell the client its request went through.
func TestErrorHandlerThatWritesNothing(t *testing.T) {
	e := setup(t)
	r := router()
	var seen []int
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithErrorHandler(func(c *gin.Context, status int, err error) {
		seen = append(seen, status)
	})), func(c *gin.Context) { c.Status(http.StatusCreated) })
	w := do(r, req{path: "/payments", user: "alice"})
	if w.Code != http.StatusBadRequest || len(seen) != 1 || seen[0] != http.StatusBadRequest {
		t.Fatalf("no Idempotency-Key, error handler writes nothing: %d, handler saw %v; want 400", w.Code, seen)
	}
	key := idemKey(t)
	if w := do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":1}`}); w.Code != http.StatusCreated {
		t.Fatalf("first request: %d", w.Code)
	}
	w = do(r, req{path: "/payments", user: "alice", key: key, body: `{"a":2}`})
	if w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body, error handler writes nothing: %d, want 422", w.Code)
	}
}
