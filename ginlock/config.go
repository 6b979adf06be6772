package ginlock

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the options.
const (
	DefaultRetention     = 24 * time.Hour // WithReplay
	DefaultMaxBody       = 1 << 20        // WithMaxBody: 1 MiB of request body
	DefaultMaxReplayBody = 1 << 20        // WithMaxReplayBody: 1 MiB of stored response body
)

// Option configures the middleware built by New. A nil Option is skipped.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type replayMode uint8

const (
	replayAuto replayMode = iota // on iff the key uses the Idempotency-Key header
	replayOn
	replayOff
)

type config struct {
	wait          time.Duration
	ttl           time.Duration
	replay        replayMode
	retention     time.Duration
	storable      func(status int) bool
	headers       []string
	maxBody       int64
	maxReplayBody int
	failOpen      bool
	onError       func(c *gin.Context, status int, err error)
	skip          func(c *gin.Context) bool
	tp            trace.TracerProvider
	mp            metric.MeterProvider
	log           *slog.Logger
}

func newConfig(opts []Option) config {
	cfg := config{
		retention:     DefaultRetention,
		storable:      defaultStorable,
		headers:       []string{"Content-Type", "Location"},
		maxBody:       DefaultMaxBody,
		maxReplayBody: DefaultMaxReplayBody,
		onError:       DefaultErrorHandler,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// statusClientClosed is nginx's 499 Client Closed Request, which grpc-gateway also gives for
// a cancelled call: the client left before the answer, which reports that and no result.
const statusClientClosed = 499

// defaultStorable stores what a retry would get again: 2xx, 3xx (a 303 after a POST points
// at what it made) and 4xx, except 304, 206 and 416 and the 4xx that say "not now" (408, 409,
// 425, 429, and 499, the client left): replaying those would keep the key from ever running.
func defaultStorable(status int) bool {
	switch status {
	case http.StatusNotModified, // an answer to the request's own validators, not a result
		// answers to the request's own Range, which the fingerprint does not cover: a retry
		// asking for another range (or the whole) must not get this one
		http.StatusPartialContent, http.StatusRequestedRangeNotSatisfiable,
		http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
		statusClientClosed:
		return false
	}
	return status >= 200 && status < 500
}

// WithWait makes a request wait up to d for a busy lock, and for the request's own context
// (a client that went away stops waiting), before it is answered 409. Default: no wait, a
// busy lock gives 409 at once. d <= 0 restores the default. The first look at the lock gets
// at least a second whatever d, so a short d never makes a free lock look busy.
func WithWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.wait = max(d, 0) })
}

// WithTTL gives each lock a fixed lease of d without renewal (dlock.WithTTL): a handler still
// running after d loses the lock. Default: the Client's lease, renewed by its watchdog while
// the handler runs. d <= 0 restores the default.
func WithTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.ttl = max(d, 0) })
}

// WithReplay turns idempotent replay on and keeps stored responses for retention (<= 0:
// DefaultRetention, 24 h; values below 1 s are raised to 1 s, as asynqlock's done markers
// are). Default: replay is on, with DefaultRetention, exactly when the key function uses the
// Idempotency-Key header (keyfunc.Func.UsesIdempotencyKey).
func WithReplay(retention time.Duration) Option {
	return optionFunc(func(c *config) {
		c.replay = replayOn
		c.retention = DefaultRetention
		if retention > 0 {
			c.retention = max(retention, time.Second)
		}
	})
}

// WithoutReplay turns idempotent replay off: the middleware only locks, and the key is used
// as the key function gives it, without the method and route scope replay adds.
func WithoutReplay() Option {
	return optionFunc(func(c *config) { c.replay = replayOff })
}

// WithReplayStatuses sets which statuses of the handler's response are stored for replay.
// Default: every 2xx, 3xx and 4xx except 304, 206 and 416 (answers to the request's own
// validators and Range) and 408, 409, 425, 429 and 499 (transient: the retry they invite must
// run); 5xx are not stored either, so the client's retry runs the handler again.
// A nil f restores the default. Whatever f says, a response that a ginlock middleware
// nested inside this one made itself (400, 409, 413, 422, 503) is never stored.
func WithReplayStatuses(f func(status int) bool) Option {
	return optionFunc(func(c *config) {
		c.storable = f
		if f == nil {
			c.storable = defaultStorable
		}
	})
}

// WithReplayHeaders sets the response headers stored and replayed with the status and body,
// replacing the default list: Content-Type and Location. A Content-Encoding set by the chain
// after the middleware is always stored (the body is kept as the chain encoded it); one set
// before it, by a compressing middleware outside, is not (the kept body is not encoded). A
// Content-Length the chain set (c.File, a HEAD answer) is always stored too. Trailers are not
// stored: a replay has none. A body stored gzip or deflate encoded is decoded for a retry whose
// Accept-Encoding does not accept that encoding (no Accept-Encoding: none accepted), and
// replayed without Content-Encoding; other encodings are replayed as stored. Values a
// middleware before ginlock set for the request (a session cookie it refreshes, a request id)
// are not stored: a retry keeps its own; stored Set-Cookie values are added to them, and so are
// the values of a header the chain added to (Vary: Origin set before ginlock, Accept-Language
// added by the handler); other stored headers replace them.
// Idempotent-Replayed is always added to a replay. It panics if a name is not a header field
// name (RFC 9110: a token, such as "X-Request-Id"; not empty, no spaces): no response carries
// it, so it would be stored for no one.
func WithReplayHeaders(names ...string) Option {
	for _, n := range names {
		if n == "" || strings.IndexFunc(n, notTokenChar) >= 0 {
			panic(fmt.Sprintf("ginlock: WithReplayHeaders(%q): not a header field name (RFC 9110 token)", n))
		}
	}
	return optionFunc(func(c *config) {
		c.headers = make([]string, len(names))
		for i, n := range names {
			c.headers[i] = http.CanonicalHeaderKey(n)
		}
	})
}

// notTokenChar reports whether r may not appear in an RFC 9110 token (a header field name).
func notTokenChar(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// WithMaxBody caps the request body read for the key and the fingerprint at n bytes; a larger
// body is answered 413. Default DefaultMaxBody (1 MiB); n <= 0 restores it.
func WithMaxBody(n int64) Option {
	return optionFunc(func(c *config) {
		c.maxBody = DefaultMaxBody
		if n > 0 {
			c.maxBody = n
		}
	})
}

// WithMaxReplayBody caps the response body kept for replay at n bytes. A larger response is
// sent in full but not stored (the lock is released, and a retry runs the handler again).
// Default DefaultMaxReplayBody (1 MiB); n <= 0 restores it.
func WithMaxReplayBody(n int) Option {
	return optionFunc(func(c *config) {
		c.maxReplayBody = DefaultMaxReplayBody
		if n > 0 {
			c.maxReplayBody = n
		}
	})
}

// WithFailOpen runs the handler without a lock (and without replay) when the lock store is
// unavailable (dlock.ErrUnavailable), logging a warning and counting the request with
// outcome "unavailable" and ginlock.fail_open=true. Default: fail closed with 503.
func WithFailOpen() Option {
	return optionFunc(func(c *config) { c.failOpen = true })
}

// WithErrorHandler replaces the rendering of every response the middleware makes itself
// (400, 409, 413, 422, 500, 503). f gets the status and the cause (see New); it should write
// the response, and the middleware aborts the chain after it. The status and, when it
// applies, Retry-After are already set: an f that writes nothing answers with an empty body
// and that status. Default DefaultErrorHandler (problem+json); nil restores it.
func WithErrorHandler(f func(c *gin.Context, status int, err error)) Option {
	return optionFunc(func(c *config) {
		c.onError = f
		if f == nil {
			c.onError = DefaultErrorHandler
		}
	})
}

// WithSkipper makes requests for which f returns true pass through without key, lock or
// replay. Default: nothing is skipped, safe methods (GET, HEAD, OPTIONS) included, because a
// per-account lock may have to guard a read too; skip them here if the route needs it.
func WithSkipper(f func(c *gin.Context) bool) Option {
	return optionFunc(func(c *config) { c.skip = f })
}

// WithTracerProvider sets the provider of the tracer for ginlock.lock spans. Default: the
// global provider (otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the provider of the meter for the ginlock.requests counter.
// Default: the global provider (otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithLogger sets a logger for what a client never sees: fail-open requests, lost locks,
// failed releases and stores, answers that could not be stored (over WithMaxReplayBody, a
// hijacked connection, a body that may be cut short: their retry runs the handler again),
// unreadable records, key functions that failed (500; not when the error handler answers
// their error below 500). Default: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.log = l })
}
