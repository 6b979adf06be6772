package ginlock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// retryAfter is the Retry-After value, in seconds, sent with 409 (busy) and 503.
const retryAfter = "1"

// New returns a middleware that runs the rest of the chain under the lock of the key derived
// by key from each request, on client. Use it per route or per group. Responses it makes
// itself, and the cause given to the error handler:
//
//   - 400: the key could not be derived (*keyfunc.PartError naming the part and wrapping
//     keyfunc.ErrMissing, ErrInvalid, ErrTooLong or ErrMalformedBody), or the body could not
//     be read to its end;
//   - 413: the body is over WithMaxBody, or over an http.MaxBytesReader limit set before the
//     middleware (matches keyfunc.ErrBodyTooLarge);
//   - 409 with Retry-After: the lock is busy (matches dlock.ErrNotObtained);
//   - 409 with Retry-After: the lock was lost while the handler ran and the handler had
//     written nothing (matches dlock.ErrLockLost); nothing is stored;
//   - 422: replay only, the key's stored response belongs to another fingerprint (ErrMismatch);
//   - 503 with Retry-After: the lock store is unavailable (dlock.ErrUnavailable; with
//     WithFailOpen the handler runs without a lock instead), or the dlock Client was closed
//     (dlock.ErrClosed, never fail-open);
//   - 503 with Retry-After: the request's context ended before the lock answered (a
//     deadline the server set, spent before the middleware; the client gone), so nothing
//     is known of the lock (ErrRequestEnded, matching the context's error and its cause);
//   - 500: a keyfunc.From function failed (logged; the answer says nothing of its error), a
//     context value keyfunc cannot use (of a type it cannot read, keyfunc.ErrUnsupportedType;
//     over its part cap or not the integer asked for, keyfunc.ErrContextValue), a path
//     parameter the key needs and the matched route does not declare (ErrUndeclaredParam),
//     a key dlock refuses (dlock.ErrInvalidKey) or an unreadable record (ErrBadRecord).
//
// With replay on, the key is scoped by method and route on top of the key function's own
// scope; add the caller (keyfunc.ContextValue in Func.Scope) so that users never share keys.
// New panics if client or key is nil: that is a programming error, found at start-up.
func New(client *dlock.Client, key *keyfunc.Func, opts ...Option) gin.HandlerFunc {
	if client == nil {
		panic("ginlock: New with a nil *dlock.Client")
	}
	if key == nil {
		panic("ginlock: New with a nil *keyfunc.Func")
	}
	cfg := newConfig(opts)
	m := &middleware{client: client, key: key, cfg: cfg, tel: newTelemetry(&cfg)}
	m.replay = cfg.replay == replayOn || cfg.replay == replayAuto && key.UsesIdempotencyKey()
	m.needsIdemKey = key.UsesIdempotencyKey()
	m.params = key.RequiredParams()
	if cfg.ttl > 0 {
		m.lockOpts = append(m.lockOpts, dlock.WithTTL(cfg.ttl))
	}
	if cfg.wait > 0 {
		m.lockOpts = append(m.lockOpts, dlock.WithMaxWait(cfg.wait))
	}
	if m.replay {
		m.key = key.Scope(keyfunc.Meta(keyfunc.MetaMethod).Named("method"),
			keyfunc.Meta(keyfunc.MetaRoute).Named("route").Optional())
		m.replayOpts = append(append(m.replayOpts, m.lockOpts...), dlock.SkipCompleted())
		// A body the chain encoded cannot be read back without its coding (the recorder
		// leaves out a Content-Encoding set outside the chain, where the body is not encoded).
		// A length the chain announced (c.File, c.DataFromReader, a HEAD answer that sets it)
		// is replayed as announced: without it a HEAD replay would have none, and a body over
		// net/http's 2 KiB buffer would go chunked.
		m.headers = cfg.headers
		for _, n := range []string{"Content-Encoding", "Content-Length"} {
			if !slices.Contains(m.headers, n) {
				m.headers = append(slices.Clip(m.headers), n)
			}
		}
	}
	m.name = runtime.FuncForPC(reflect.ValueOf(m.handle).Pointer()).Name()
	return m.handle
}

type middleware struct {
	client *dlock.Client
	key    *keyfunc.Func
	cfg    config
	tel    *telemetry
	replay bool
	// needsIdemKey: the key uses the Idempotency-Key header, so a request without one (or
	// with an empty one; an Optional part) is locked but not replayed, whatever the mode.
	needsIdemKey bool
	// params: the path parameters the key needs (see undeclaredParam).
	params     []string
	lockOpts   []dlock.AcquireOption
	replayOpts []dlock.AcquireOption // lockOpts and SkipCompleted
	headers    []string              // replayed headers: cfg.headers, Content-Encoding and Content-Length
	name       string                // what gin's HandlerName says of this middleware
}

type lockKey struct{}

// rejectedKey marks a request that a ginlock middleware answered itself (400, 409, ...):
// an enclosing one must not store that answer, since the handler never ran.
type rejectedKey struct{}

// FromContext returns the lock the innermost ginlock middleware holds for the current request,
// for its fencing token (dlock.Lock.Token) or key, as dlock.FromContext and
// asynqlock.FromContext do for a context. A handler may Release it to let the next request
// for the key in before it finishes (a slow rendering): the middleware then has nothing to
// release, and with replay nothing is stored, so a retry runs the handler again. The request's
// context carries the lock and ends with that release: work after it needs a context taken
// before, without the lock's cancellation (context.WithoutCancel). ok is false outside the
// handler chain of a locked request (skipped, fail-open, or after the middleware returned).
func FromContext(c *gin.Context) (lk *dlock.Lock, ok bool) {
	v, _ := c.Get(lockKey{})
	lk, _ = v.(*dlock.Lock)
	return lk, lk != nil
}

func (m *middleware) handle(c *gin.Context) {
	if m.cfg.skip != nil && m.cfg.skip(c) {
		c.Next()
		return
	}
	route := c.FullPath()
	if route == "" && c.HandlerName() == m.name {
		// No route matched (ginlock used with r.Use) and no handler follows this one (no
		// NoRoute or NoMethod handler, no middleware after it): nothing runs that a lock
		// could protect, and gin answers 404 or 405 after the chain.
		c.Next()
		return
	}
	origCtx := c.Request.Context()

	src := NewSource(c, m.cfg.maxBody)
	var key string
	var err error
	if param, ok := m.undeclaredParam(c, route); ok {
		// The route cannot carry what the key needs: the server's mistake, a 500 below.
		err = fmt.Errorf("%w: parameter %q, route %q", ErrUndeclaredParam, param, route)
	} else {
		key, err = m.key.Key(src)
	}
	hasIdemKey := false // the request carries a (non-blank) Idempotency-Key for the key
	if m.needsIdemKey {
		v, _ := src.Value(keyfunc.KindHeader, keyfunc.IdempotencyKeyHeader)
		hasIdemKey = strings.Trim(v, " \t") != ""
	}
	replaying := m.replay && (hasIdemKey || !m.needsIdemKey)
	var fp requestPrint
	if err == nil && replaying {
		fp, err = fingerprint(c, src)
	}
	if err == nil && src.bodyErr != nil {
		// The body was read, consumed in part, and failed (over the cap, cut short) for a
		// part that did not need it after all: the handler must not get what is left.
		err = src.bodyErr
	}
	if err != nil {
		status := keyStatus(err)
		m.reject(c, status, err)
		// A 500 is a failure, so a span and the log mark it; a key function's error text may
		// hold request data, while an undeclared parameter's names only the parameter and
		// the route. Not a failure: the client's own mistake (400, 413), whatever status
		// the error handler answers it with; an error the error handler answered below 500
		// (a key function that looked up an order that does not exist: 404); a key function
		// that gave up because the request's context ended (counted as canceled).
		switch {
		case status == http.StatusInternalServerError && origCtx.Err() != nil && errors.Is(err, origCtx.Err()):
			m.tel.end(origCtx, nil, route, OutcomeCanceled, false, nil)
		case status == http.StatusInternalServerError && c.Writer.Status() >= http.StatusInternalServerError:
			spanErr, msg := errKeyFunc, errKeyFunc.Error()
			if errors.Is(err, ErrUndeclaredParam) {
				spanErr, msg = err, ErrUndeclaredParam.Error()
			}
			m.cfg.log.ErrorContext(origCtx, msg, "route", route, "error", err)
			_, span := m.tel.start(origCtx, route, "")
			m.tel.end(origCtx, span, route, OutcomeError, false, spanErr)
		default:
			m.tel.end(origCtx, nil, route, OutcomeInvalid, false, nil)
		}
		return
	}

	if origCtx.Err() != nil {
		// Ended before the lock was tried: no span, no call (see requestEnded).
		m.requestEnded(c, origCtx, nil, route)
		return
	}
	ctx, span := m.tel.start(origCtx, route, key)
	lock, err := m.acquire(ctx, key, replaying)
	var done *dlock.CompletedError
	switch {
	case err == nil:
		m.tel.end(ctx, span, route, OutcomeObtained, false, nil)
		m.run(c, origCtx, lock, replaying, fp)
	case errors.As(err, &done):
		rec, derr := unmarshalRecord(done.Record)
		switch {
		case derr != nil:
			m.tel.end(ctx, span, route, OutcomeError, false, derr)
			m.cfg.log.ErrorContext(origCtx, "ginlock: unreadable replay record", "key_hash", dlock.KeyHash(key), "route", route)
			m.reject(c, http.StatusInternalServerError, derr)
		case !rec.matches(fp):
			m.tel.end(ctx, span, route, OutcomeMismatch, false, nil)
			m.reject(c, http.StatusUnprocessableEntity, ErrMismatch)
		default:
			m.tel.end(ctx, span, route, OutcomeReplayed, false, nil)
			replay(c, rec)
		}
	case errors.Is(err, dlock.ErrNotObtained) && m.cfg.wait <= 0 && origCtx.Err() != nil && errors.Is(err, origCtx.Err()):
		// A look without a wait that ended with the request's context never saw the lock
		// busy (a busy lock is ErrNotObtained alone): the context ended first.
		m.requestEnded(c, origCtx, span, route)
	case errors.Is(err, dlock.ErrNotObtained):
		outcome := OutcomeBusy
		if errors.Is(origCtx.Err(), context.Canceled) {
			// The client went away (net/http cancels the request's context), not the wait:
			// a busy count would tell dashboards of contention that was not there. A deadline
			// the server set on the request that ended the wait is contention: busy.
			outcome = OutcomeCanceled
		}
		m.tel.end(ctx, span, route, outcome, false, nil)
		c.Header("Retry-After", retryAfter)
		if hasIdemKey {
			err = fmt.Errorf("%w (%w)", ErrKeyInProgress, err)
		}
		m.reject(c, http.StatusConflict, err)
	case errors.Is(err, dlock.ErrUnavailable) && m.cfg.failOpen:
		m.tel.end(ctx, span, route, OutcomeUnavailable, true, err)
		m.cfg.log.WarnContext(origCtx, "ginlock: lock store unavailable, running the handler without a lock (fail-open)",
			"key_hash", dlock.KeyHash(key), "route", route, "error", err)
		c.Next()
	case errors.Is(err, dlock.ErrUnavailable), errors.Is(err, dlock.ErrClosed):
		m.tel.end(ctx, span, route, OutcomeUnavailable, false, err)
		c.Header("Retry-After", retryAfter)
		m.reject(c, http.StatusServiceUnavailable, err)
	default:
		m.tel.end(ctx, span, route, OutcomeError, false, err)
		m.cfg.log.ErrorContext(origCtx, "ginlock: lock refused", "key_hash", dlock.KeyHash(key), "route", route, "error", err)
		m.reject(c, http.StatusInternalServerError, err)
	}
}

// requestEnded answers a request whose context ended before the lock answered: a deadline
// the server set, spent in the middleware before this one, or the client gone. Nothing is
// known of the lock, so this is neither busy nor a failure of the store: 503 with
// Retry-After, counted as canceled. The error matches the context's error and its cause.
func (m *middleware) requestEnded(c *gin.Context, ctx context.Context, span trace.Span, route string) {
	m.tel.end(ctx, span, route, OutcomeCanceled, false, nil)
	err := fmt.Errorf("%w: %w", ErrRequestEnded, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	c.Header("Retry-After", retryAfter)
	m.reject(c, http.StatusServiceUnavailable, err)
}

// undeclaredParam returns a path parameter that the key needs and the matched route does not
// declare (a matched route has every parameter it declares). Unmatched requests (NoRoute)
// have no route to blame.
func (m *middleware) undeclaredParam(c *gin.Context, route string) (string, bool) {
	if route == "" {
		return "", false
	}
	for _, name := range m.params {
		if _, ok := c.Params.Get(name); !ok {
			return name, true
		}
	}
	return "", false
}

// acquire takes the lock at once, or waits up to WithWait and the request's context. With
// replay, a stored response for the key comes back instead (*dlock.CompletedError). Under
// WithWait, a wait shorter than a Redis round trip still takes a free lock, and a store that
// does not answer is still unavailable (dlock.WithMaxWait).
func (m *middleware) acquire(ctx context.Context, key string, replay bool) (*dlock.Lock, error) {
	opts := m.lockOpts
	if replay {
		opts = m.replayOpts
	}
	if m.cfg.wait <= 0 {
		return m.client.TryAcquire(ctx, key, opts...)
	}
	return m.client.Acquire(ctx, key, opts...)
}

// reject renders an error response through the error handler and stops the chain. The
// status is set first: a handler that writes nothing (one that only logs) answers with it,
// not with gin's default 200.
func (m *middleware) reject(c *gin.Context, status int, err error) {
	c.Set(rejectedKey{}, true)
	c.Status(status)
	m.cfg.onError(c, status, err)
	c.Abort()
}

// run calls the rest of the chain under lock, then stores the response or releases the lock,
// also when the chain panics (the panic goes on to gin's recovery; see finish for what is
// stored then).
func (m *middleware) run(c *gin.Context, origCtx context.Context, lock *dlock.Lock, replay bool, fp requestPrint) {
	origWriter := c.Writer
	tail := newTailWriter(origWriter, c.Request.Method)
	c.Writer = tail
	var rec *recorder
	if replay {
		rec = newRecorder(c, m.headers, m.cfg.maxReplayBody)
		c.Writer = rec
	}
	outer, _ := FromContext(c) // a lock of an enclosing ginlock, if any
	c.Set(lockKey{}, lock)
	c.Request = c.Request.WithContext(dlock.WithLock(origCtx, lock))

	// The headers set before the chain: a lost-lock 409 goes out with these, not with the
	// handler's, which describe an answer that is not sent.
	before := c.Writer.Header().Clone()
	returned := false
	defer func() {
		c.Request = c.Request.WithContext(origCtx)
		c.Writer = origWriter
		c.Set(lockKey{}, outer)
		defer tail.finish(!returned) // the answer's last byte, once the lock is released and the answer stored
		m.finish(c, origCtx, lock, rec, fp, returned, before)
	}()
	c.Next()
	returned = true
}

// finish ends the hold: Complete (store and release in one step) for a storable response,
// Release otherwise. Nothing is stored after a panic before the response started, once the
// lock was lost, when a ginlock
// middleware inside this one answered the request itself, or for a request no route matched.
func (m *middleware) finish(c *gin.Context, origCtx context.Context, lock *dlock.Lock, rec *recorder,
	fp requestPrint, returned bool, before http.Header) {
	// Not the request's cancellation: a client that went away must not leave the lock held
	// until its lease ends. dlock bounds a release whose context cannot end.
	ctx := context.WithoutCancel(origCtx)
	// A callback of the user's that panics here (WithReplayStatuses, the error handler) must
	// not leave the lock held: the watchdog would renew it until the process exits. Every
	// path below releases it or finds it released, so a held lock means a panic.
	defer func() {
		if lock.Err() == nil {
			_ = lock.Release(ctx)
		}
	}()
	if lost := lock.Err(); errors.Is(lost, dlock.ErrLockLost) {
		m.cfg.log.WarnContext(origCtx, "ginlock: lock lost while the handler ran; response not stored",
			"key_hash", dlock.KeyHash(lock.Key()), "route", c.FullPath(), "error", lost)
		// Lost on our clock, which runs ahead of Redis's: Redis may still have the lock as
		// ours. The release frees it there (it checks the owner); it reports the loss again.
		// Deferred: the error handler that renders the 409 may panic.
		defer func() { _ = lock.Release(ctx) }()
		// A status of its own (c.Status(201), a redirect) is an answer even without a body.
		if returned && !c.Writer.Written() && c.Writer.Status() == http.StatusOK {
			h := c.Writer.Header()
			clear(h)
			maps.Copy(h, before)
			c.Header("Retry-After", retryAfter) // nothing was stored: a retry runs it again
			m.reject(c, http.StatusConflict, lost)
		}
		return
	} else if lost != nil {
		// The handler ended the hold itself (Release on the lock FromContext gives it, to let
		// the next request in before a slow rendering): the key is free already, and with
		// replay its response can no longer be stored with the release.
		if rec != nil {
			m.cfg.log.WarnContext(origCtx, "ginlock: the handler ended the hold itself; response not stored, a retry runs the handler again",
				"key_hash", dlock.KeyHash(lock.Key()), "route", c.FullPath())
		}
		return
	}
	// A chain that panicked after its response started may have done its work: with gin's
	// Recovery before this middleware the client gets what was written (Recovery cannot
	// change a status that went out); without it, net/http drops the connection. The answer
	// is stored when it is known whole whatever the panic (as long as its Content-Length, or
	// no body and a status of its own: see recorder.complete), so that a retry does not run
	// the handler again. Before the response started, Recovery answers 500 and nothing is
	// stored. A Recovery placed after this middleware returns the chain as if nothing
	// happened; the recorder tells its panic by the 500 it asks for too late (failedLate).
	answered := returned
	if rec != nil {
		rec.chainDone()
		if !returned && rec.ResponseWriter.Written() {
			rec.panicked, answered = true, true
		}
	}
	// An unmatched route (engine-wide use) is answered by gin after the chain returns, with a
	// body the recorder never sees: nothing to store.
	if answered && rec != nil && !c.GetBool(rejectedKey{}) && c.FullPath() != "" && m.cfg.storable(rec.ResponseWriter.Status()) {
		r, why := rec.record()
		if r != nil {
			r.fingerprint = fp.sum()
			if err := lock.Complete(ctx, r.marshal(), m.cfg.retention); err != nil {
				m.cfg.log.WarnContext(origCtx, "ginlock: storing the response failed", "key_hash", dlock.KeyHash(lock.Key()),
					"route", c.FullPath(), "error", err)
			}
			return
		}
		// The handler ran and answered with a status that is stored, but this answer cannot
		// be: a retry with the same key runs the handler again.
		m.cfg.log.WarnContext(origCtx, "ginlock: response not stored; a retry runs the handler again",
			"key_hash", dlock.KeyHash(lock.Key()), "route", c.FullPath(), "status", rec.ResponseWriter.Status(), "reason", why)
	}
	if err := lock.Release(ctx); err != nil {
		m.cfg.log.WarnContext(origCtx, "ginlock: release failed", "key_hash", dlock.KeyHash(lock.Key()),
			"route", c.FullPath(), "error", err)
	}
}
