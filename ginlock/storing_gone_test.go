package ginlock_test

import (
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockguard/lockguard/ginlock"
	"github.com/lockguard/lockguard/internal/locktest"
)

// The case Idempotency-Key exists for: the client times out while the payment runs and
// retries with the same key. A handler that does not stream and finishes its work answers
// with a body rendered in several writes (c.HTML, c.SecureJSON of an array, hand-written
// parts); that answer is stored although the client was gone, and the retry gets it
// instead of running the payment again.
func TestSeveralWritesAnswerStoredAfterClientGone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		respond func(c *gin.Context, n int32)
		want    string
	}{
		{"two WriteString calls", func(c *gin.Context, n int32) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString(`{"charge":`)
			_, _ = c.Writer.WriteString(`1}`)
		}, `{"charge":1}`},
		{"c.HTML", func(c *gin.Context, n int32) {
			c.HTML(http.StatusCreated, "receipt", gin.H{"N": n})
		}, "<p>charge 1</p><p>done</p>"},
		{"c.SecureJSON of an array", func(c *gin.Context, n int32) {
			c.SecureJSON(http.StatusCreated, []int32{n})
		}, "while(1);[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := router()
			r.SetHTMLTemplate(template.Must(template.New("receipt").Parse(`<p>charge {{.N}}</p><p>done</p>`)))
			var runs atomic.Int32
			client := newHangUp(t)
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				n := runs.Add(1) // the money moves here
				client.now()     // the client times out and hangs up while the payment is made
				tc.respond(c, n)
			})
			key := idemKey(t)
			first := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`, ctx: client.ctx})
			if first.Code != http.StatusCreated || first.Body.String() != tc.want {
				t.Fatalf("first: %d %q, want 201 %q", first.Code, first.Body, tc.want)
			}
			retry := do(r, req{path: "/payments", user: "alice", key: key, body: `{"amount":100}`})
			if runs.Load() != 1 || retry.Code != http.StatusCreated || retry.Body.String() != tc.want ||
				retry.Header().Get(ginlock.ReplayedHeader) != "true" {
				t.Fatalf("retry after the client hung up: %d %q replayed=%q after %d handler runs; "+
					"want the stored 201 %q replayed and the handler run once", retry.Code, retry.Body,
					retry.Header().Get(ginlock.ReplayedHeader), runs.Load(), tc.want)
			}
		})
	}
}

// A handler that answered and then panicked may have done its work: an answer known to be
// whole (as long as its Content-Length, or no body and a status of its own) is stored, so
// the retry gets it instead of running the payment again. A body without a Content-Length
// is not, whatever the number of writes: a panic can come part-way through it (a csv.Writer
// sends 4 KiB per write); the retry runs the handler.
func TestAnswerBeforePanicIsStored(t *testing.T) {
	receipt := []byte(`{"charge":1}`)
	for _, tc := range []struct {
		name     string
		respond  func(c *gin.Context)
		first    string // the body the client gets on the first request
		replayed bool
	}{
		{"body with its Content-Length then a panic", func(c *gin.Context) {
			c.Header("Content-Length", strconv.Itoa(len(receipt)))
			c.Data(http.StatusCreated, "application/json", receipt)
		}, string(receipt), true},
		{"201 without a body then a panic", func(c *gin.Context) {
			c.Header("Location", "/payments/1")
			c.Status(http.StatusCreated)
			c.Writer.WriteHeaderNow()
		}, "", true},
		{"c.JSON then a panic", func(c *gin.Context) {
			c.JSON(http.StatusCreated, gin.H{"charge": 1})
		}, string(receipt), false},
		{"two writes then a panic", func(c *gin.Context) {
			c.Status(http.StatusCreated)
			_, _ = c.Writer.WriteString(`{"charge":`)
			_, _ = c.Writer.WriteString(`1}`)
		}, string(receipt), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			r := gin.New()
			r.Use(gin.RecoveryWithWriter(io.Discard), auth)
			var runs atomic.Int32
			r.POST("/payments", ginlock.New(e.locks, payKey), func(c *gin.Context) {
				tc.respond(c)
				if runs.Add(1) == 1 {
					panic("after the answer")
				}
			})
			q := req{path: "/payments", body: `{}`, user: "alice", key: idemKey(t)}
			if w := do(r, q); w.Code != http.StatusCreated || w.Body.String() != tc.first {
				t.Fatalf("first: %d %q, want 201 %q", w.Code, w.Body, tc.first)
			}
			if keys := locktest.Held(t, e.rdb); len(keys) != 0 {
				t.Fatalf("locks still held after a panic: %v", keys)
			}
			w := do(r, q)
			replayed := w.Header().Get(ginlock.ReplayedHeader) == "true"
			wantRuns := map[bool]int32{true: 1, false: 2}[tc.replayed]
			if w.Code != http.StatusCreated || w.Body.String() != tc.first || replayed != tc.replayed || runs.Load() != wantRuns {
				t.Fatalf("retry: %d %q replayed=%v after %d runs; want 201 %q replayed=%v after %d",
					w.Code, w.Body, replayed, runs.Load(), tc.first, tc.replayed, wantRuns)
			}
		})
	}
}

// A handler that stops part-way because its client went away after the body started, with
// every write accepted (rows read with the request's context), has not written all of its
// answer: what it wrote is not stored, and the retry runs it again.
func TestRowsStoppedByClientGoneNotStored(t *testing.T) {
	first, w, runs := exportTwice(t, func(c *gin.Context, client *hangUp) {
		ctx := c.Request.Context()
		for i := range 3 {
			if ctx.Err() != nil {
				return // the rows' query failed with the request's context
			}
			_, _ = fmt.Fprintf(c.Writer, "row %d\n", i)
			if i == 1 {
				client.now() // the client hangs up after two rows
			}
		}
	})
	if first.Body.String() != "row 0\nrow 1\n" {
		t.Fatalf("first: %q, want the two rows written before the client left", first.Body)
	}
	if w.Header().Get(ginlock.ReplayedHeader) != "" || runs != 2 || w.Body.String() != "row 0\nrow 1\nrow 2\n" {
		t.Fatalf("retry: %q replayed=%q after %d runs; want the handler to run again", w.Body,
			w.Header().Get(ginlock.ReplayedHeader), runs)
	}
}

// A handler that flushed (it streams) and then stopped because its client went away, with
// every write accepted, may have stopped anywhere: what it wrote is not stored even though
// it came in several writes without a failure.
func TestFlushedWritesNotStoredAfterClientGone(t *testing.T) {
	_, w, runs := exportTwice(t, func(c *gin.Context, client *hangUp) {
		_, _ = c.Writer.WriteString("part1\n")
		c.Writer.Flush()
		client.now()
		if c.Request.Context().Err() != nil {
			return // client gone: stop streaming
		}
		_, _ = c.Writer.WriteString("part2\n")
	})
	if w.Header().Get(ginlock.ReplayedHeader) != "" || runs != 2 || !strings.HasSuffix(w.Body.String(), "part2\n") {
		t.Fatalf("retry: %q replayed=%q after %d runs; want the handler to run again", w.Body,
			w.Header().Get(ginlock.ReplayedHeader), runs)
	}
}
