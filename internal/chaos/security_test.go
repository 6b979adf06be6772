package chaos

// Hostile input and tenant isolation against a Gin route protected by ginlock on a real
// Redis. These tests carry no build tag: they run with make test.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/lockguard/lockguard/keyfunc"
)

// secApp is a payment API the way the docs recommend it: the pay key is the order from
// the JSON body and the Idempotency-Key, scoped by the authenticated user.
type secApp struct {
	rdb   *redis.Client
	locks *dlock.Client
	h     http.Handler
	ran   atomic.Int64 // handler executions
}

// secPayKey is the recommended shape: user scope, then order and Idempotency-Key.
var secPayKey = keyfunc.MustTemplate("pay:{order}:{key}", map[string]keyfunc.Part{
	"order": keyfunc.JSON("order_id"),
	"key":   keyfunc.IdempotencyKey(),
})

func newSecApp(t *testing.T, rdb *redis.Client) *secApp {
	t.Helper()
	gin.SetMode(gin.TestMode)
	a := &secApp{rdb: rdb, locks: dlock.New(rdb)}
	t.Cleanup(func() { _ = a.locks.Close() })
	r := gin.New()
	r.Use(func(c *gin.Context) { // stands for an auth middleware
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("user", u)
		}
		c.Next()
	})
	pay := func(c *gin.Context) {
		a.ran.Add(1)
		var req struct {
			OrderID string `json:"order_id"`
		}
		if err := c.ShouldBindJSON(&req); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": "bad_json"})
			return
		}
		var id [8]byte
		_, _ = rand.Read(id[:])
		c.JSON(http.StatusCreated, gin.H{"user": c.GetString("user"), "order_id": req.OrderID, "charge": hex.EncodeToString(id[:])})
	}
	r.POST("/pay", ginlock.New(a.locks, secPayKey.Scope(keyfunc.ContextValue("user").Named("user"))), pay)
	// The documented limit: the same route without the user scope.
	r.POST("/unscoped/pay", ginlock.New(a.locks, secPayKey), pay)
	r.POST("/accounts/:id/withdraw", ginlock.New(a.locks,
		keyfunc.MustTemplate("account:{id}", map[string]keyfunc.Part{"id": keyfunc.Param("id")}), ginlock.WithoutReplay()),
		func(c *gin.Context) { a.ran.Add(1); c.JSON(http.StatusOK, gin.H{"ok": true}) })
	a.h = r
	return a
}

// secRequest builds a request; header values are set raw, whatever bytes they hold.
func secRequest(method, path string, body io.Reader, header map[string]string) *http.Request {
	r := httptest.NewRequest(method, "/", body)
	r.URL.Path = path
	r.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		r.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	return r
}

func (a *secApp) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	return w
}

// usedMemory is Redis's INFO memory used_memory in bytes.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// wantProblemJSON checks a middleware rejection: the status and an RFC 9457 body.
func wantProblemJSON(t *testing.T, code int, header http.Header, body []byte, status int) {
	t.Helper()
	if code != status {
		t.Fatalf("status %d, want %d: %.200s", code, status, body)
	}
	if ct := header.Get("Content-Type"); ct != ginlock.ProblemContentType {
		t.Fatalf("Content-Type %q, want %q", ct, ginlock.ProblemContentType)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Status != status || p.Detail == "" {
		t.Fatalf("problem body %.200q: %v", body, err)
	}
	if len(body) > 1024 {
		t.Fatalf("problem body of %d bytes echoes the input", len(body))
	}
}

// Hostile requests are refused with a clear 4xx before anything reaches Redis: no lock, no
// record, no fence is written, and Redis memory does not grow.
func TestHostileInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := newSecApp(t, rdb)
	ctx := context.Background()

	nested := `{"order_id":"o1","x":` + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + `}`
	big := `{"order_id":"o1","pad":"` + strings.Repeat("x", 2<<20) + `"}`
	user := map[string]string{"X-User": "alice"}
	with := func(kv ...string) map[string]string {
		h := map[string]string{"X-User": "alice"}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	cases := []struct {
		name   string
		req    func() *http.Request
		status int
	}{
		{"body over 1 MiB, with Content-Length", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(big), with("Idempotency-Key", "k1"))
		}, http.StatusRequestEntityTooLarge},
		{"body over 1 MiB, chunked", func() *http.Request {
			r := secRequest("POST", "/pay", io.MultiReader(strings.NewReader(big)), with("Idempotency-Key", "k1"))
			r.ContentLength = -1
			return r
		}, http.StatusRequestEntityTooLarge},
		{"JSON nested 10,000 levels", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(nested), with("Idempotency-Key", "k1"))
		}, http.StatusBadRequest},
		{"JSON body that is 10,000 open brackets", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(strings.Repeat("[", 10_000)), with("Idempotency-Key", "k1"))
		}, http.StatusBadRequest},
		{"Idempotency-Key of 1 MB", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", strings.Repeat("k", 1<<20)))
		}, http.StatusBadRequest},
		{"Idempotency-Key of 256 bytes (cap 255)", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", strings.Repeat("k", 256)))
		}, http.StatusBadRequest},
		{"control characters in Idempotency-Key", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", "k\x00\x01\x1b[2J"))
		}, http.StatusBadRequest},
		{"CR LF in Idempotency-Key", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", "k\r\nX-Admin: 1"))
		}, http.StatusBadRequest},
		{"invalid UTF-8 in Idempotency-Key", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", "k\xff\xfe"))
		}, http.StatusBadRequest},
		{"quoted Idempotency-Key with a bad escape", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), with("Idempotency-Key", `"k\x"`))
		}, http.StatusBadRequest},
		{"missing Idempotency-Key", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), user)
		}, http.StatusBadRequest},
		{"no user (scope part missing)", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`), map[string]string{"Idempotency-Key": "k1"})
		}, http.StatusBadRequest},
		{"order_id of 5,000 bytes (cap 4096)", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":"`+strings.Repeat("o", 5000)+`"}`), with("Idempotency-Key", "k1"))
		}, http.StatusBadRequest},
		{"invalid UTF-8 inside a JSON string", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader("{\"order_id\":\"\xff\"}"), with("Idempotency-Key", "k1"))
		}, http.StatusBadRequest},
		{"malformed JSON", func() *http.Request {
			return secRequest("POST", "/pay", strings.NewReader(`{"order_id":`), with("Idempotency-Key", "k1"))
		}, http.StatusBadRequest},
		{"path parameter of 2,000 bytes (cap 1024)", func() *http.Request {
			return secRequest("POST", "/accounts/"+strings.Repeat("a", 2000)+"/withdraw", nil, user)
		}, http.StatusBadRequest},
	}
	memBefore := usedMemory(t, rdb)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran := a.ran.Load()
			w := a.serve(tc.req())
			wantProblemJSON(t, w.Code, w.Header(), w.Body.Bytes(), tc.status)
			if a.ran.Load() != ran {
				t.Fatal("the handler ran")
			}
			if n := rdb.DBSize(ctx).Val(); n != 0 {
				t.Fatalf("%d keys in Redis after a rejected request: %v", n, rdb.Keys(ctx, "*").Val())
			}
		})
	}
	memAfter := usedMemory(t, rdb)

	// Accepted hostile bytes: a path parameter with control characters, invalid UTF-8 and
	// Redis glob/hash-tag characters is escaped into a printable, bounded key.
	t.Run("escaped hostile path parameter", func(t *testing.T) {
		for _, id := range []string{"a\x00b\x1b\xff{x}*?[", "}{", strings.Repeat("\xfe", 1024), "a b\tc\r\nd"} {
			w := a.serve(secRequest("POST", "/accounts/"+id+"/withdraw", nil, user))
			if w.Code != http.StatusOK {
				t.Fatalf("param %q: status %d %s", id, w.Code, w.Body)
			}
		}
		keys := rdb.Keys(ctx, "*").Val()
		for _, k := range keys {
			if len(k) > 3*keyfunc.DefaultMaxKeyLen {
				t.Errorf("key of %d bytes", len(k))
			}
			for i := range len(k) {
				if k[i] < 0x21 || k[i] > 0x7e {
					t.Errorf("key %q holds byte %#x", k, k[i])
				}
			}
			if rdb.PTTL(ctx, k).Val() < 0 {
				t.Errorf("key %q has no TTL", k)
			}
		}
	})

	// A flood of 2,000 distinct valid keys: every stored record has a TTL and costs a bounded
	// number of bytes.
	memFlood := usedMemory(t, rdb)
	const flood = 2000
	for i := range flood {
		w := a.serve(secRequest("POST", "/pay", strings.NewReader(`{"order_id":"o1"}`),
			with("Idempotency-Key", fmt.Sprintf("flood-%d-%s", i, strings.Repeat("z", 200)))))
		if w.Code != http.StatusCreated {
			t.Fatalf("flood request %d: %d %s", i, w.Code, w.Body)
		}
	}
	perRecord := (usedMemory(t, rdb) - memFlood) / flood
	noTTL := 0
	iter := rdb.Scan(ctx, 0, "*", 500).Iterator()
	for iter.Next(ctx) {
		if rdb.PTTL(ctx, iter.Val()).Val() < 0 {
			noTTL++
		}
	}
	t.Logf("RESULT | hostile input (%d kinds) | rejected=%d handler_runs_on_rejects=0 keys_after_rejects=0 redis_mem_delta=%dB flood_records=%d bytes_per_record=%d keys_without_ttl=%d",
		len(cases), len(cases), memAfter-memBefore, flood, perRecord, noTTL)
	if memAfter-memBefore > 64<<10 {
		t.Errorf("Redis memory grew by %d bytes over rejected requests", memAfter-memBefore)
	}
	if perRecord > 2048 || noTTL > 0 {
		t.Errorf("%d bytes per stored record, %d keys without TTL", perRecord, noTTL)
	}
}

// Hostile bytes sent over a real socket meet net/http first: a 2 MB header is refused with
// 431 and a control character in a header value with 400 before any middleware runs, while
// a 1 MB key and a byte >= 0x80 (legal obs-text in HTTP/1.1) reach ginlock, which answers
// 400 problem+json.
func TestHostileInputOverTheWire(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := newSecApp(t, rdb)
	hs := httptest.NewServer(a.h)
	defer hs.Close()
	raw := func(key string) (int, http.Header, []byte) {
		t.Helper()
		conn, err := net.Dial("tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"order_id":"o1"}`
		go func() {
			_, _ = fmt.Fprintf(conn, "POST /pay HTTP/1.1\r\nHost: x\r\nX-User: alice\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
				key, len(body), body)
		}()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	if code, _, body := raw(strings.Repeat("k", 2<<20)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("2 MB key: %d %.100s, want 431 from net/http", code, body)
	}
	// 1 MB fits net/http's default limit (1 MiB plus 4 KiB of slack): ginlock refuses it.
	code, h, body := raw(strings.Repeat("k", 1<<20))
	wantProblemJSON(t, code, h, body, http.StatusBadRequest)
	if code, _, body := raw("k\x01x"); code != http.StatusBadRequest {
		t.Errorf("control byte: %d %.100s, want 400 from net/http", code, body)
	}
	code, h, body = raw("k\xff\xfe")
	wantProblemJSON(t, code, h, body, http.StatusBadRequest)
	if n := rdb.DBSize(context.Background()).Val(); n != 0 || a.ran.Load() != 0 {
		t.Fatalf("%d keys, %d handler runs after rejected requests", n, a.ran.Load())
	}
}

// User B sending user A's Idempotency-Key (same order, same body) never sees A's stored
// response: the user scope gives B its own key, lock and record. The same route without the
// scope shows the documented limit.
func TestTenantIsolation(t *testing.T) {
	srv := redistest.Start(t)
	a := newSecApp(t, srv.Client(t))
	type resp struct {
		User     string `json:"user"`
		Charge   string `json:"charge"`
		replayed bool
		code     int
	}
	pay := func(path, user, key string) resp {
		t.Helper()
		w := a.serve(secRequest("POST", path, strings.NewReader(`{"order_id":"o-42"}`), map[string]string{"X-User": user, "Idempotency-Key": key}))
		var r resp
		_ = json.Unmarshal(w.Body.Bytes(), &r)
		r.code, r.replayed = w.Code, w.Header().Get(ginlock.ReplayedHeader) == "true"
		return r
	}
	leaks := 0
	const rounds = 50
	for i := range rounds {
		key := fmt.Sprintf("shared-%d", i)
		var ra, rb resp
		var wg sync.WaitGroup // A and B at the same time: different locks, neither waits
		wg.Go(func() { ra = pay("/pay", "alice", key) })
		wg.Go(func() { rb = pay("/pay", "bob", key) })
		wg.Wait()
		if ra.code != http.StatusCreated || rb.code != http.StatusCreated || ra.replayed || rb.replayed {
			t.Fatalf("round %d: alice %+v, bob %+v", i, ra, rb)
		}
		again := pay("/pay", "bob", key)
		if rb.User != "bob" || again.User != "bob" || again.Charge == ra.Charge || rb.Charge == ra.Charge {
			leaks++
		}
		if !again.replayed || again.Charge != rb.Charge {
			t.Fatalf("round %d: bob's retry %+v, want the replay of %+v", i, again, rb)
		}
	}
	if leaks > 0 {
		t.Errorf("bob saw alice's response in %d of %d rounds", leaks, rounds)
	}
	// Without the scope, the same key is one record for everybody: what Scope is for.
	ua := pay("/unscoped/pay", "alice", "unscoped")
	ub := pay("/unscoped/pay", "bob", "unscoped")
	t.Logf("RESULT | tenant isolation, user B replays user A's Idempotency-Key | rounds=%d b_saw_a=%d unscoped_route_b_saw_a=%v",
		rounds, leaks, ub.replayed && ub.Charge == ua.Charge)
	if !ub.replayed || ub.User != "alice" {
		t.Errorf("unscoped route: bob got %+v; the documented limit no longer shows", ub)
	}
}
