package ginlock_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
)

// paymentRoutes registers POST /payments and POST /refunds, both keyed by payKey, and
// counts how often each handler ran.
func paymentRoutes(e *env, delay time.Duration, opts ...ginlock.Option) (*gin.Engine, *atomic.Int32) {
	r := router()
	var runs atomic.Int32
	h := func(c *gin.Context) {
		n := runs.Add(1)
		time.Sleep(delay)
		c.Header("Location", "/payments/42")
		c.Header("X-Not-Stored", "1")
		c.JSON(http.StatusCreated, gin.H{"id": 42, "run": n, "at": time.Now().UnixNano()})
	}
	r.POST("/payments", ginlock.New(e.locks, payKey, opts...), h)
	r.POST("/refunds", ginlock.New(e.locks, payKey, opts...), h)
	return r, &runs
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	e := setup(t)
	r, runs := paymentRoutes(e, 50*time.Millisecond)
	key := idemKey(t)
	q := req{path: "/payments", body: `{"amount":100}`, user: "alice", key: key}

	const n = 100
	res := make([]*httptest.ResponseRecorder, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range res {
		wg.Go(func() {
			<-start
			res[i] = do(r, q)
		})
	}
	close(start)
	wg.Wait()

	if got := runs.Load(); got != 1 {
		t.Fatalf("handler ran %d times, want 1", got)
	}
	var original *httptest.ResponseRecorder
	for _, w := range res {
		if w.Code == http.StatusCreated && w.Header().Get(ginlock.ReplayedHeader) == "" {
			if original != nil {
				t.Fatal("two responses were not replays")
			}
			original = w
		}
	}
	if original == nil {
		t.Fatal("no original response")
	}
	var busy, replayed int
	for _, w := range res {
		switch {
		case w == original:
		case w.Code == http.StatusConflict:
			if p := wantProblem(t, w, http.StatusConflict); !strings.Contains(p.Detail, "same Idempotency-Key is in progress") {
				t.Errorf("duplicate in progress: detail %q", p.Detail)
			}
			busy++
		case w.Code == http.StatusCreated && w.Header().Get(ginlock.ReplayedHeader) == "true":
			if !bytes.Equal(w.Body.Bytes(), original.Body.Bytes()) {
				t.Fatalf("replayed body %s differs from %s", w.Body, original.Body)
			}
			replayed++
		default:
			t.Fatalf("unexpected response %d %v %s", w.Code, w.Header(), w.Body)
		}
	}
	t.Logf("1 original, %d busy (409), %d replayed", busy, replayed)

	// After completion every duplicate is a replay.
	w := do(r, q)
	if w.Code != http.StatusCreated || !bytes.Equal(w.Body.Bytes(), original.Body.Bytes()) {
		t.Fatalf("late duplicate: %d %s, want the original %s", w.Code, w.Body, original.Body)
	}
}

func TestReplay(t *testing.T) {
	e := setup(t)
	r, runs := paymentRoutes(e, 0)
	key := idemKey(t)
	first := do(r, req{path: "/payments", body: `{"amount":100,"currency":"EUR"}`, user: "alice", key: key})
	if first.Code != http.StatusCreated || first.Header().Get(ginlock.ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", first.Code, first.Header())
	}

	t.Run("identical", func(t *testing.T) {
		// Same JSON in another key order and spacing, and the key as an sf-string.
		w := do(r, req{path: "/payments", body: `{ "currency": "EUR", "amount": 1e2 }`, user: "alice", key: `"` + key + `"`})
		if w.Code != first.Code || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
			t.Fatalf("replay %d %s, want %d %s", w.Code, w.Body, first.Code, first.Body)
		}
		for _, h := range []string{"Content-Type", "Location"} {
			if w.Header().Get(h) != first.Header().Get(h) {
				t.Errorf("%s = %q, want %q", h, w.Header().Get(h), first.Header().Get(h))
			}
		}
		if w.Header().Get(ginlock.ReplayedHeader) != "true" {
			t.Errorf("missing %s: true", ginlock.ReplayedHeader)
		}
		if w.Header().Get("X-Not-Stored") != "" {
			t.Error("a header outside WithReplayHeaders was replayed")
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
	})

	t.Run("changed body", func(t *testing.T) {
		w := do(r, req{path: "/payments", body: `{"amount":999,"currency":"EUR"}`, user: "alice", key: key})
		wantProblem(t, w, http.StatusUnprocessableEntity)
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
	})

	t.Run("another user", func(t *testing.T) {
		w := do(r, req{path: "/payments", body: `{"amount":100,"currency":"EUR"}`, user: "bob", key: key})
		if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" {
			t.Fatalf("bob got %d %v %s, want his own 201", w.Code, w.Header(), w.Body)
		}
		if bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
			t.Fatal("bob got alice's response")
		}
		if runs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", runs.Load())
		}
	})

	t.Run("another route", func(t *testing.T) {
		w := do(r, req{path: "/refunds", body: `{"amount":100,"currency":"EUR"}`, user: "alice", key: key})
		if w.Code != http.StatusCreated || w.Header().Get(ginlock.ReplayedHeader) != "" {
			t.Fatalf("refund got %d %v, want its own 201", w.Code, w.Header())
		}
	})
}

// A 5xx from the handler (a crashed payment call, a bank that is down) is not stored: the
// retry runs the handler again, and its answer is then replayed.
func TestServerErrorsAreNotStored(t *testing.T) {
	e := setup(t)
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			r := router()
			var runs atomic.Int32
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				if runs.Add(1) == 1 {
					c.JSON(status, gin.H{"error": "down"})
					return
				}
				c.JSON(http.StatusCreated, gin.H{"ok": true})
			})
			q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
			for i, want := range []int{status, http.StatusCreated, http.StatusCreated} {
				if w := do(r, q); w.Code != want {
					t.Fatalf("request %d: %d %s, want %d", i, w.Code, w.Body, want)
				}
			}
			if runs.Load() != 2 {
				t.Fatalf("handler ran %d times, want 2 (the %d retried, then replay)", runs.Load(), status)
			}
		})
	}
}

func TestReplayStatusesAndHeaders(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	r.POST("/payments", ginlock.New(e.locks, payKey,
		ginlock.WithReplayStatuses(func(s int) bool { return s == http.StatusAccepted }),
		ginlock.WithReplayHeaders("x-payment-id", "x-trace", "x-absent"),
		ginlock.WithReplay(time.Minute)), func(c *gin.Context) {
		n := runs.Add(1)
		c.Header("X-Payment-Id", "p-1")
		c.Writer.Header().Add("X-Trace", "a")
		c.Writer.Header().Add("X-Trace", "b")
		if n == 1 {
			c.String(http.StatusBadRequest, "no")
			return
		}
		c.String(http.StatusAccepted, "queued")
	})
	q := req{path: "/payments", user: "alice", key: idemKey(t)}
	do(r, q) // 400: not stored with this option
	do(r, q) // 202: stored
	w := do(r, q)
	if w.Code != http.StatusAccepted || w.Body.String() != "queued" || runs.Load() != 2 {
		t.Fatalf("got %d %q after %d runs, want a replayed 202 after 2", w.Code, w.Body, runs.Load())
	}
	if got := w.Header().Values("X-Payment-Id"); !slices.Equal(got, []string{"p-1"}) {
		t.Fatalf("replayed X-Payment-Id %q in %v, want [p-1]", got, w.Header())
	}
	if got := w.Header().Values("X-Trace"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("replayed X-Trace %q, want both values in order", got)
	}
	if _, ok := w.Header()["X-Absent"]; ok {
		t.Fatalf("replayed X-Absent, which the handler never set: %v", w.Header())
	}
}

// A response over WithMaxReplayBody is sent in full but not stored, and the logger says so:
// its retry runs the handler again.
func TestLargeResponseIsNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	var logs bytes.Buffer
	big := bytes.Repeat([]byte("x"), 100)
	r.POST("/export", ginlock.New(e.locks, payKey, ginlock.WithMaxReplayBody(64),
		ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))), func(c *gin.Context) {
		runs.Add(1)
		c.Data(http.StatusOK, "text/plain", big)
	})
	q := req{path: "/export", user: "alice", key: idemKey(t)}
	for range 2 {
		if w := do(r, q); w.Code != http.StatusOK || w.Body.Len() != len(big) {
			t.Fatalf("got %d with %d bytes, want the full 200", w.Code, w.Body.Len())
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2: a response over the cap is not stored", runs.Load())
	}
	if n := strings.Count(logs.String(), `msg="ginlock: response not stored; a retry runs the handler again"`); n != 2 ||
		!strings.Contains(logs.String(), `reason="the body is over WithMaxReplayBody"`) {
		t.Fatalf("want two warnings naming the cap, got:\n%s", logs.String())
	}
}

// With WithWait, a duplicate that arrives while the first runs waits for it and then gets
// the stored response instead of 409.
func TestWaitingDuplicateGetsReplay(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	r.POST("/payments", ginlock.New(e.locks, payKey, ginlock.WithWait(10*time.Second)), func(c *gin.Context) {
		runs.Add(1)
		close(started)
		<-release
		c.JSON(http.StatusCreated, gin.H{"at": time.Now().UnixNano()})
	})
	q := req{path: "/payments", body: `{"amount":1}`, user: "alice", key: idemKey(t)}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- do(r, q) }()
	<-started
	dupc := make(chan *httptest.ResponseRecorder)
	go func() { dupc <- do(r, q) }()
	time.Sleep(50 * time.Millisecond) // let the duplicate join the line; a late one replays too
	close(release)
	orig, dup := <-first, <-dupc
	if dup.Code != http.StatusCreated || dup.Header().Get(ginlock.ReplayedHeader) != "true" ||
		!bytes.Equal(dup.Body.Bytes(), orig.Body.Bytes()) || runs.Load() != 1 {
		t.Fatalf("duplicate got %d %v %s after %d runs, want the replayed original", dup.Code, dup.Header(), dup.Body, runs.Load())
	}
}

// A handler that forwards the request with engine.HandleContext (gin's internal redirect)
// has the response written by gin's own writer, around the middleware: its body cannot be
// stored. It is not stored as an empty answer: the client gets the forwarded answer, the
// logger says why, and a retry runs the handler again and gets the whole answer too.
func TestHandleContextResponseNotStored(t *testing.T) {
	e := setup(t)
	r := router()
	var runs atomic.Int32
	var logs bytes.Buffer
	r.POST("/v2/payments", func(c *gin.Context) {
		runs.Add(1)
		c.JSON(http.StatusCreated, gin.H{"id": 42})
	})
	r.POST("/v1/payments", ginlock.New(e.locks, payKey, ginlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))),
		func(c *gin.Context) {
			c.Request.URL.Path = "/v2/payments"
			r.HandleContext(c)
		})
	q := req{path: "/v1/payments", body: `{"amount":1}`, user: "alice", key: idemKey(t)}
	for i := range 2 {
		w := do(r, q)
		if w.Code != http.StatusCreated || w.Body.String() != `{"id":42}` || w.Header().Get(ginlock.ReplayedHeader) != "" {
			t.Fatalf("request %d got %d %v %q, want the forwarded 201 {\"id\":42}, not replayed", i+1, w.Code, w.Header(), w.Body)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("forwarded handler ran %d times, want 2: nothing was stored", runs.Load())
	}
	if n := strings.Count(logs.String(), `msg="ginlock: response not stored; a retry runs the handler again"`); n != 2 ||
		!strings.Contains(logs.String(), "engine.HandleContext") {
		t.Fatalf("want two warnings naming HandleContext, got:\n%s", logs.String())
	}
	// The key is free again: nothing holds it after the forwarded requests.
	if w := do(r, q); w.Code != http.StatusCreated {
		t.Fatalf("third request got %d, want 201", w.Code)
	}
}
