package ginlock

import (
	"bufio"
	"net"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
)

// recorder passes every write through to the client and keeps a copy of what the replay
// record needs: the chosen headers as they were when the response started, and the body up
// to a cap. A response over the cap or a hijacked connection is not stored. The copy is what
// the handler wrote, whether or not the client received it, so a client that went away
// mid-response gets the whole response when it retries, as long as the recorder can tell the
// handler wrote all of it (see complete). A Content-Encoding set before the chain ran (a
// compressing middleware outside ginlock) is not kept: the body kept here is not encoded.
type recorder struct {
	gin.ResponseWriter
	names         []string // header names to keep, canonical
	max           int
	outerEncoding bool        // Content-Encoding was set outside the chain
	header        http.Header // the kept headers, taken when the response started
	body          []byte
	writes        int  // Write calls with a body
	writeFailed   bool // a write to the client failed
	chainErrors   bool // the chain recorded errors (c.Error), as gin does when a render fails
	gone          bool // the request's context ended before the handler returned
	flushed       bool // the handler flushed: it streams
	overflow      bool
	hijacked      bool
}

func newRecorder(w gin.ResponseWriter, names []string, max int) *recorder {
	_, outer := w.Header()["Content-Encoding"]
	return &recorder{ResponseWriter: w, names: names, max: max, outerEncoding: outer}
}

// started takes the headers once, just before they go out.
func (w *recorder) started() {
	if w.header == nil && !w.ResponseWriter.Written() {
		w.header = w.keptHeaders()
	}
}

func (w *recorder) keptHeaders() http.Header {
	h := make(http.Header, len(w.names))
	src := w.ResponseWriter.Header()
	for _, n := range w.names {
		if n == "Content-Encoding" && w.outerEncoding {
			continue
		}
		if vs, ok := src[n]; ok {
			h[n] = append([]string(nil), vs...)
		}
	}
	return h
}

func (w *recorder) keep(p []byte) {
	if w.overflow {
		return
	}
	if len(w.body)+len(p) > w.max {
		w.overflow, w.body = true, nil
		return
	}
	w.body = append(w.body, p...)
}

func (w *recorder) WriteHeaderNow() {
	w.started()
	w.ResponseWriter.WriteHeaderNow()
}

func (w *recorder) Write(p []byte) (int, error) {
	w.started()
	w.keep(p)
	n, err := w.ResponseWriter.Write(p)
	w.wrote(len(p), err)
	return n, err
}

func (w *recorder) WriteString(s string) (int, error) {
	w.started()
	w.keep([]byte(s))
	n, err := w.ResponseWriter.WriteString(s)
	w.wrote(len(s), err)
	return n, err
}

func (w *recorder) wrote(n int, err error) {
	if n > 0 {
		w.writes++
	}
	if err != nil {
		w.writeFailed = true
	}
}

// clientGone records that the request's context ended before the handler returned: a
// streaming handler stops when its client goes away (c.Stream, a select on ctx.Done), and
// net/http often accepts writes after a disconnect, so no write has to fail for the body to
// be cut short. The body then counts as complete only by the rules after a failed write.
func (w *recorder) clientGone() { w.gone = true }

// complete reports whether the kept body is all the handler meant to send. Without a failed
// write (or the client gone) it is. After one, the handler may have stopped writing (a
// stream, c.DataFromReader, c.File): the body is complete when it has its Content-Length, or,
// without one, when the handler wrote it in a single call (c.JSON, c.String, c.Data), which
// was kept whole, unless it flushed with its client gone: a stream's first chunk is one
// write too. An answer without a body and with a status of its own (201 with a Location, a
// 303 after a POST, a 204) is complete: nothing was cut short. An empty 200 is not taken
// for one then: it is also what a stream that stopped before its first chunk leaves; nor is
// an empty answer of a chain that recorded an error (a c.DataFromReader whose reader failed
// before its first byte sets its status and records the failure).
func (w *recorder) complete() bool {
	if !w.writeFailed && !w.gone {
		return true
	}
	if cl := w.ResponseWriter.Header().Get("Content-Length"); cl != "" {
		n, err := strconv.Atoi(cl)
		return err == nil && n == len(w.body)
	}
	if w.writes == 0 && !w.flushed {
		return w.ResponseWriter.Status() != http.StatusOK && !w.chainErrors
	}
	return w.writes == 1 && !(w.gone && w.flushed)
}

func (w *recorder) Flush() {
	w.flushed = true
	w.started()
	w.ResponseWriter.Flush()
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return w.ResponseWriter.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// record returns the response the handler wrote, or false when it cannot be stored.
func (w *recorder) record() (*record, bool) {
	if w.overflow || w.hijacked || !w.complete() {
		return nil, false
	}
	h := w.header
	if h == nil { // nothing written yet: gin sends the headers as they are now
		h = w.keptHeaders()
	}
	return &record{status: w.ResponseWriter.Status(), header: h, body: w.body}, true
}
