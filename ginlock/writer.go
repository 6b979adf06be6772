package ginlock

import (
	"bufio"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// recorder passes every write through to the client and keeps a copy of what the replay
// record needs: the chosen headers as they were when the response started, and the body up
// to a cap. A response over the cap or a hijacked connection is not stored. The copy is what
// the handler wrote, whether or not the client received it: a client that went away
// mid-response gets the whole response when it retries.
type recorder struct {
	gin.ResponseWriter
	names    []string // header names to keep, canonical
	max      int
	header   http.Header // the kept headers, taken when the response started
	body     []byte
	overflow bool
	hijacked bool
}

func newRecorder(w gin.ResponseWriter, names []string, max int) *recorder {
	return &recorder{ResponseWriter: w, names: names, max: max}
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
	return w.ResponseWriter.Write(p)
}

func (w *recorder) WriteString(s string) (int, error) {
	w.started()
	w.keep([]byte(s))
	return w.ResponseWriter.WriteString(s)
}

func (w *recorder) Flush() {
	w.started()
	w.ResponseWriter.Flush()
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return w.ResponseWriter.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// record returns the response as sent so far, or false when it cannot be stored.
func (w *recorder) record() (*record, bool) {
	if w.overflow || w.hijacked {
		return nil, false
	}
	h := w.header
	if h == nil { // nothing written yet: gin sends the headers as they are now
		h = w.keptHeaders()
	}
	return &record{status: w.ResponseWriter.Status(), header: h, body: w.body}, true
}
