package ginlock

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
)

// tailWriter holds back the last byte of an answer whose length the chain announced
// (c.Data, c.File, c.DataFromReader set Content-Length) until the middleware has released
// the lock and stored the answer. net/http sends such a body as it is written, so without
// this a client could have the whole answer while the lock is still held, and the next
// request for the key it sends at once (the next step on the same account, or a retry) would
// find it busy: 409. An answer without an announced length needs nothing of the kind: net/http
// keeps a short one until the handler chain returns, and ends a longer, chunked one only then.
type tailWriter struct {
	gin.ResponseWriter
	method  string
	length  int64 // the announced length, -1 when none; read at the first body write
	sent    int64 // body bytes passed on
	tail    [1]byte
	holding bool // tail holds the body's last byte
	looked  bool // length was read
}

func newTailWriter(w gin.ResponseWriter, method string) *tailWriter {
	return &tailWriter{ResponseWriter: w, method: method, length: -1}
}

// announced reads the Content-Length the chain set, once, when its body starts: a HEAD
// answer, or a status without a body, has nothing to hold back.
func (w *tailWriter) announced() int64 {
	if !w.looked {
		w.looked = true
		if !w.bodiless() {
			if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil && n > 0 {
				w.length = n
			}
		}
	}
	return w.length
}

// bodiless reports whether the answer has no body to send: a HEAD answer, or a status
// without one.
func (w *tailWriter) bodiless() bool {
	return w.method == http.MethodHead || !bodyAllowed(w.Status())
}

// holds reports whether a write of n bytes ends the announced body exactly: its last byte is
// then held back. A write that goes past the announced length is passed on as it is, for
// net/http to refuse.
func (w *tailWriter) holds(n int) bool {
	return n > 0 && !w.holding && w.announced() >= 0 && w.sent+int64(n) == w.length
}

func (w *tailWriter) Write(p []byte) (int, error) {
	return writeHolding(w, p, w.ResponseWriter.Write)
}

func (w *tailWriter) WriteString(s string) (int, error) {
	return writeHolding(w, s, w.ResponseWriter.WriteString)
}

// writeHolding writes p with write, holding its last byte back when p ends the announced body
// (see holds). The byte is copied: p is the caller's to reuse. Once the body is whole, with
// its last byte held, a write of more is refused as net/http refuses it (ErrContentLength):
// passed on, it would take the held byte's place.
func writeHolding[T string | []byte](w *tailWriter, p T, write func(T) (int, error)) (int, error) {
	if w.holding && len(p) > 0 {
		return 0, http.ErrContentLength
	}
	if !w.holds(len(p)) {
		n, err := write(p)
		w.sent += int64(n)
		return n, err
	}
	n, err := write(p[:len(p)-1])
	w.sent += int64(n)
	if err != nil {
		return n, err
	}
	w.tail[0], w.holding = p[len(p)-1], true
	return len(p), nil
}

// Size counts the byte held back, as written: the chain wrote it.
func (w *tailWriter) Size() int {
	if w.holding {
		return w.ResponseWriter.Size() + 1
	}
	return w.ResponseWriter.Size()
}

// Flush passes a flush on, except for an answer that is whole once its headers are out (a
// HEAD answer, a status without a body, Content-Length 0): flushed, it would reach the client
// whole while the lock is held, with no byte to hold back: its status is written, as a flush
// writes it, and net/http sends it when the chain returns.
func (w *tailWriter) Flush() {
	if w.bodiless() || w.Header().Get("Content-Length") == "0" {
		w.ResponseWriter.WriteHeaderNow()
		return
	}
	w.ResponseWriter.Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *tailWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish sends the byte held back, once the lock is released. A client gone by then misses
// only what it no longer waits for. After a panic (panicked) the byte is flushed as well:
// net/http drops the connection of a panicking handler without sending what it buffered,
// and the rest of the body went out as it was written.
func (w *tailWriter) finish(panicked bool) {
	if w.holding {
		w.holding = false
		_, _ = w.ResponseWriter.Write(w.tail[:])
		if panicked {
			w.ResponseWriter.Flush()
		}
	}
}
