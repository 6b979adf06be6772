package ginlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	goleak.VerifyTestMain(m)
}

// userKey is where the test auth middleware puts the caller's id.
type userKey struct{}

// payKey is the usual payment key: the Idempotency-Key, scoped by the caller.
var payKey = keyfunc.Join(keyfunc.IdempotencyKey()).Scope(keyfunc.ContextValue(userKey{}).Named("user"))

// accountKey locks one account, whatever the route.
var accountKey = keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id")})

// auth stands for an auth middleware: the X-User header becomes the caller's id.
func auth(c *gin.Context) {
	if u := c.GetHeader("X-User"); u != "" {
		c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), userKey{}, u))
	}
	c.Next()
}

type env struct {
	srv   *redistest.Server
	rdb   *redis.Client
	locks *dlock.Client
}

// setup starts a Redis server and a dlock Client on it, both closed when the test ends.
func setup(t testing.TB, opts ...dlock.Option) *env {
	t.Helper()
	return setupRedis(t, nil, opts...)
}

// setupRedis is setup with the go-redis options changed by ro.
func setupRedis(t testing.TB, ro func(*redis.Options), opts ...dlock.Option) *env {
	t.Helper()
	srv := redistest.Start(t)
	var rdb *redis.Client
	if ro != nil {
		rdb = srv.Client(t, ro)
	} else {
		rdb = srv.Client(t)
	}
	locks := dlock.New(rdb, opts...)
	t.Cleanup(func() { _ = locks.Close() })
	return &env{srv: srv, rdb: rdb, locks: locks}
}

// router returns a Gin engine with the test auth middleware.
func router() *gin.Engine {
	r := gin.New()
	r.Use(auth)
	return r
}

var keySeq atomic.Int64

// idemKey gives each request series its own Idempotency-Key.
func idemKey(t testing.TB) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), keySeq.Add(1))
}

// req is one request to send with do.
type req struct {
	method, path, body string
	user, key          string
	header             map[string]string
	ctx                context.Context
}

func do(h http.Handler, q req) *httptest.ResponseRecorder {
	if q.method == "" {
		q.method = http.MethodPost
	}
	r := httptest.NewRequest(q.method, q.path, strings.NewReader(q.body))
	if q.ctx != nil {
		r = r.WithContext(q.ctx)
	}
	if q.body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if q.user != "" {
		r.Header.Set("X-User", q.user)
	}
	if q.key != "" {
		r.Header.Set(keyfunc.IdempotencyKeyHeader, q.key)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Part   string `json:"part"`
}

// wantProblem checks that w is a problem+json response with status, and returns its body.
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int) problemBody {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != ginlock.ProblemContentType {
		t.Fatalf("Content-Type = %q, want %q", ct, ginlock.ProblemContentType)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	// The title is RFC 9110's reason phrase (RFC 9457 for "about:blank"), which renamed
	// two of the phrases net/http has.
	title := map[int]string{
		http.StatusRequestEntityTooLarge: "Content Too Large",
		http.StatusUnprocessableEntity:   "Unprocessable Content",
	}[status]
	if title == "" {
		title = http.StatusText(status)
	}
	if p.Status != status || p.Type == "" || p.Title != title || p.Detail == "" {
		t.Fatalf("problem body %+v: want status %d with type, title %q and detail", p, status, title)
	}
	return p
}

// redisKeys lists the Redis keys matching pattern (tests only: KEYS blocks a real server).
func (e *env) redisKeys(t testing.TB, pattern string) []string {
	t.Helper()
	keys, err := e.rdb.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	return keys
}

// hangUp is a client that hangs up once while the handler runs, as one that timed out does:
// ctx is its request's context, which the handler's first call of now ends.
type hangUp struct {
	ctx    context.Context
	cancel chan context.CancelFunc
}

func newHangUp(t testing.TB) *hangUp {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &hangUp{ctx: ctx, cancel: make(chan context.CancelFunc, 1)}
	h.cancel <- cancel
	return h
}

// now hangs up, the first time it is called.
func (h *hangUp) now() {
	select {
	case cancel := <-h.cancel:
		cancel()
	default:
	}
}

// exportTwice serves handler at POST /export behind ginlock with replay, sends one request
// from a client that hangs up where the handler calls client.now(), then the same request
// again from a client that stays. It returns both answers and how often the handler ran.
func exportTwice(t *testing.T, handler func(c *gin.Context, client *hangUp)) (first, retry *httptest.ResponseRecorder, runs int32) {
	t.Helper()
	e := setup(t)
	r := router()
	var n atomic.Int32
	client := newHangUp(t)
	r.POST("/export", ginlock.New(e.locks, payKey), func(c *gin.Context) {
		n.Add(1)
		handler(c, client)
	})
	key := idemKey(t)
	first = do(r, req{path: "/export", user: "u", key: key, ctx: client.ctx})
	retry = do(r, req{path: "/export", user: "u", key: key})
	return first, retry, n.Load()
}
