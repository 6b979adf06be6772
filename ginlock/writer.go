package ginlock

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"slices"
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
	c             *gin.Context // the request: its method, and the errors its chain records
	names         []string     // header names to keep, canonical
	max           int
	outerEncoding bool        // Content-Encoding was set outside the chain
	outer         http.Header // values of kept headers set outside the chain (nil: none)
	header        http.Header // the kept headers, taken when the response started
	added         []string    // of those, the ones whose values the chain added to the outer ones
	body          []byte
	writes        int  // Write calls with a body
	writeFailed   bool // a write to the client failed
	chainErrors   bool // the chain recorded errors (c.Error), as gin does when a render fails
	renderFailed  bool // after the body started, the chain recorded an error and aborted
	errorsAtStart int  // errors recorded before the recorder was made (before ginlock)
	errorsAtBody  int  // errors the chain had recorded when the body started
	abortedAtBody bool // the chain was aborted when the body started (AbortWithStatusJSON)
	gone          bool // the request's context ended before the handler returned
	goneAtBody    bool // it had ended already when the body started
	panicked      bool // the chain panicked after the response started
	failedLate    bool // a 5xx was asked for after the response started (Recovery after ginlock)
	flushed       bool // the handler flushed: it streams
	seen          bool // the response started through the recorder
	overflow      bool
	hijacked      bool
}

// newRecorder wraps c's writer. It counts c.Errors when the body starts, so that finish can
// tell a render that failed part-way (gin records the error and aborts) from errors a handler
// recorded before it answered.
func newRecorder(c *gin.Context, names []string, max int) *recorder {
	h := c.Writer.Header()
	_, outerEnc := h["Content-Encoding"]
	var outer http.Header
	for _, n := range names {
		if vs := h[n]; len(vs) > 0 {
			if outer == nil {
				outer = http.Header{}
			}
			outer[n] = slices.Clone(vs)
		}
	}
	return &recorder{ResponseWriter: c.Writer, c: c, names: names, max: max, outerEncoding: outerEnc,
		outer: outer, errorsAtStart: len(c.Errors)}
}

// started takes the headers once, just before they go out.
func (w *recorder) started() {
	w.seen = true
	if w.header == nil && !w.ResponseWriter.Written() {
		w.header, w.added = w.keptHeaders()
	}
}

// keptHeaders copies the kept headers' values out of the response's, all into one slice.
// Values a middleware before ginlock set for this request (a session cookie it refreshes, a
// request id) are not the chain's and are left out (chainValues); so is a Content-Encoding
// set there. added names the headers whose kept values the chain added to such values (Vary:
// Origin set outside, Accept-Language added by the handler): a replay adds them to the
// retry's own, as the chain did.
func (w *recorder) keptHeaders() (h http.Header, added []string) {
	src := w.ResponseWriter.Header()
	kept := func(n string) bool { return n != "Content-Encoding" || !w.outerEncoding }
	total := 0
	for _, n := range w.names {
		if kept(n) {
			vs, _ := w.chainValues(n, src[n])
			total += len(vs)
		}
	}
	h = make(http.Header, len(w.names))
	vals := make([]string, 0, total)
	for _, n := range w.names {
		if vs, add := w.chainValues(n, src[n]); len(vs) > 0 && kept(n) {
			start := len(vals)
			vals = append(vals, vs...)
			h[n] = vals[start:len(vals):len(vals)]
			if add {
				added = append(added, n)
			}
		}
	}
	return h, added
}

// chainValues is vs, the response's values of header n, without those a middleware before
// ginlock had set when the chain started: when vs still begins with them, the chain added to
// them (http.SetCookie adds), and only what follows is its own (added); otherwise it
// replaced them.
func (w *recorder) chainValues(n string, vs []string) (own []string, added bool) {
	if o := w.outer[n]; len(o) > 0 && len(vs) >= len(o) && slices.Equal(vs[:len(o)], o) {
		return vs[len(o):], true
	}
	return vs, false
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

// WriteHeader passes the status on. A 5xx asked for after the response started cannot go
// out; it is what gin's Recovery placed after ginlock does when the chain panics part-way
// through its answer (c.AbortWithStatus(500)), so the chain returns as if nothing happened.
// The answer is then judged as after a panic (see complete): also when it started as a 500
// itself, once some of its body was written. The status of the answer asked for again
// before its body (every c.Render does), or a late non-5xx (a handler's slip that gin
// ignores), changes nothing.
func (w *recorder) WriteHeader(code int) {
	if code >= 500 && w.ResponseWriter.Written() && (code != w.ResponseWriter.Status() || w.writes > 0) {
		w.failedLate = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(p []byte) (int, error) {
	w.started()
	n, err := w.ResponseWriter.Write(p)
	w.wrote(p, err)
	return n, err
}

func (w *recorder) WriteString(s string) (int, error) {
	w.started()
	n, err := w.ResponseWriter.WriteString(s)
	w.wrote([]byte(s), err)
	return n, err
}

// wrote keeps what the handler wrote. Bytes net/http refused because the status has no body
// (a 204, a 304) are neither kept nor a failure: the client got the whole answer.
func (w *recorder) wrote(p []byte, err error) {
	if errors.Is(err, http.ErrBodyNotAllowed) {
		return
	}
	if len(p) > 0 {
		if w.writes == 0 {
			w.errorsAtBody = len(w.c.Errors)
			w.abortedAtBody = w.c.IsAborted()
			w.goneAtBody = w.c.Request.Context().Err() != nil
		}
		w.writes++
	}
	w.keep(p)
	if err != nil {
		w.writeFailed = true
	}
}

// chainDone records what the chain left behind when it returned, with the request's own
// context back in place:
//   - whether that context ended: a streaming handler stops when its client goes away
//     (c.Stream, a select on ctx.Done), and net/http often accepts writes after a
//     disconnect, so no write has to fail for the body to be cut short; the body then counts
//     as complete only by the rules after a failed write;
//   - whether the chain recorded errors;
//   - whether, after the body started and with no write failed, it recorded one and aborted,
//     which is what gin's c.Render does when a render fails part-way (c.DataFromReader whose
//     reader fails, a template that errors): the body may then be cut short although every
//     write went out. A chain aborted before its body started (AbortWithStatusJSON) answered
//     on purpose: an error it records after that (for a logging middleware) is not a failed
//     render. After a failed write, the error gin records is that write's, and the rules of
//     complete for a failed write apply.
func (w *recorder) chainDone() {
	errs := len(w.c.Errors)
	w.gone = w.c.Request.Context().Err() != nil
	w.chainErrors = errs > w.errorsAtStart // an error logged by a middleware before ginlock is not the chain's
	w.renderFailed = w.writes > 0 && !w.writeFailed && w.c.IsAborted() && !w.abortedAtBody && errs > w.errorsAtBody
}

// complete reports whether the kept body is all the handler meant to send. A body that
// differs from the Content-Length the handler announced is not (a reader that failed
// part-way, a length set by hand). Nor is one whose render failed after it started
// (renderFailed).
//
// After a panic, only a body as long as its Content-Length, or an answer without a body and
// with a status of its own, is: a panic can come part-way through a body of any number of
// writes (a csv.Writer sends 4 KiB per write; http.ErrAbortHandler aborts a response on
// purpose). A panic that gin's Recovery caught inside the chain counts too: it shows as a 5xx
// asked for after the response started (failedLate).
//
// Otherwise, without a failed write and with the client still there when the handler
// returned, it is. A client that went away counts only when it went away after the body
// started: the handler may have stopped part-way on ctx.Done, with every write accepted (a
// loop over rows read with the request's context). A client gone before the body started
// leaves a handler that, having done its work, renders its answer knowing that (the client
// timed out while the payment ran): a body of several writes it did not flush (c.HTML,
// c.SecureJSON of an array) is complete then, and the retry gets it instead of running the
// payment again.
//
// After a failed write, or with the client gone after the body started, or flushed with the
// client gone (a stream), the handler may have stopped writing (a stream, c.DataFromReader,
// c.File): the body is complete when it has its Content-Length, or, without one, when the
// handler wrote it in a single call (c.JSON, c.String, c.Data), which was kept whole, unless
// it also flushed: a stream's first chunk is one write too. An answer without a body and
// with a status of its own (201 with a Location, a 303 after a POST, a 204) is complete:
// nothing was cut short. An empty 200 is not taken for one then: it is also what a stream
// that stopped before its first chunk leaves; nor is an empty answer of a chain that
// recorded an error (a c.DataFromReader whose reader failed before its first byte sets its
// status and records the failure). A chain that recorded an error and sent no body, and no
// status either or an error status (c.AbortWithError sends its status at once), leaves its
// answer to whoever renders c.Errors later: not complete.
func (w *recorder) complete() bool {
	if w.renderFailed {
		return false
	}
	if w.chainErrors && w.writes == 0 && !w.flushed &&
		(!w.ResponseWriter.Written() || w.ResponseWriter.Status() >= http.StatusBadRequest) {
		// No body and errors recorded: the answer's body is whatever renders c.Errors after
		// this middleware (an error middleware outside it, or nothing: gin's bare status),
		// which the recorder never sees. A render that failed before its first byte (c.JSON
		// of a value that does not marshal) leaves this too. A success sent without a body
		// (201 with a Location, errors recorded for the log) is an answer: the work is done.
		return false
	}
	if cl := w.ResponseWriter.Header().Get("Content-Length"); cl != "" && w.c.Request.Method != http.MethodHead && bodyAllowed(w.ResponseWriter.Status()) {
		n, err := strconv.Atoi(cl)
		return err == nil && n == len(w.body)
	}
	bodiless := w.writes == 0 && !w.flushed && w.ResponseWriter.Status() != http.StatusOK && !w.chainErrors
	switch {
	case w.panicked || w.failedLate:
		return bodiless
	case !w.writeFailed && (!w.gone || w.goneAtBody && !w.flushed):
		return true
	case w.writes == 0 && !w.flushed:
		return bodiless
	}
	return w.writes == 1 && !w.flushed
}

// bodyAllowed reports whether a response with status may have a body (RFC 9110: not 1xx,
// 204 or 304).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func (w *recorder) Flush() {
	w.flushed = true
	w.started()
	w.ResponseWriter.Flush()
}

// Hijack marks the response unstorable once the connection is taken: what the handler writes
// to it is out of the recorder's sight. A refused Hijack (gin refuses one after the body
// started, HTTP/2 has none) leaves the response with net/http, recorded as usual.
func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := w.ResponseWriter.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// record returns the response the handler wrote, or, when it cannot be stored, why not.
func (w *recorder) record() (*record, string) {
	switch {
	case w.overflow:
		return nil, "the body is over WithMaxReplayBody"
	case w.hijacked:
		return nil, "the connection was hijacked"
	case w.ResponseWriter.Written() && !w.seen:
		// The response went out through another writer: engine.HandleContext (an internal
		// redirect) puts gin's own writer back in place of the recorder, which then has no
		// body to store.
		return nil, "the response was written around the middleware (engine.HandleContext)"
	case !w.complete():
		return nil, "the body may be cut short"
	}
	h, added := w.header, w.added
	if h == nil { // nothing written yet: gin sends the headers as they are now
		h, added = w.keptHeaders()
	}
	return &record{status: w.ResponseWriter.Status(), header: h, added: added, body: w.body}, ""
}
