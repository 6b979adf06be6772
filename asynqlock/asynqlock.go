package asynqlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/keyfunc"
)

// New returns asynq middleware that runs each task's handler under the dlock lock named by
// key, derived from the task (see NewSource for what a key function can read). Register it
// with mux.Use, or per handler with Wrap. It panics if client or key is nil.
//
// What a task returns besides its handler's own result:
//   - busy lock: an *ErrLocked (matching dlock.ErrNotObtained), or what WithBusy says;
//   - done marker found (WithDoneMarker): nil, without running;
//   - key not derivable (payload not JSON, field missing, too long) or rejected by dlock:
//     an error wrapping asynq.SkipRetry, so the task is archived;
//   - Redis unavailable: an error wrapping dlock.ErrUnavailable, retried by asynq;
//   - lock lost while the handler ran: an error wrapping dlock.ErrLockLost, retried by asynq.
func New(client *dlock.Client, key *keyfunc.Func, opts ...Option) asynq.MiddlewareFunc {
	m := newMiddleware(client, key, opts)
	return func(next asynq.Handler) asynq.Handler { return m.wrap(next) }
}

// Wrap returns h running under the lock, as New does for every handler of a mux. Use it when
// only some task types need a lock, or each needs its own key. It panics if h, client or key
// is nil.
func Wrap(h asynq.Handler, client *dlock.Client, key *keyfunc.Func, opts ...Option) asynq.Handler {
	return newMiddleware(client, key, opts).wrap(h)
}

// FromContext returns the lock the middleware holds for the task running with ctx: its
// Token is a fencing token to pass to the store the handler writes to. The handler may end
// the hold itself, with Complete (with WithDoneMarker its record then acknowledges later
// duplicates, in place of the marker) or Release: the middleware then has nothing left to free or record, and
// counts it as no failure. ctx ends with that release.
func FromContext(ctx context.Context) (*dlock.Lock, bool) {
	return dlock.FromContext(ctx)
}

type middleware struct {
	client *dlock.Client
	key    *keyfunc.Func
	cfg    config
	tel    *telemetry
	log    *slog.Logger
}

func newMiddleware(client *dlock.Client, key *keyfunc.Func, opts []Option) *middleware {
	if client == nil || key == nil {
		panic("asynqlock: New and Wrap need a dlock.Client and a key function")
	}
	cfg := newConfig(opts)
	if cfg.slotLoc != nil && cfg.slot == 0 {
		panic("asynqlock: WithSlotLocation without OncePerSlot: there are no slots to count")
	}
	if cfg.slot > 0 {
		key = key.Scope(SlotIn(cfg.slot, cfg.slotLoc))
	}
	return &middleware{client: client, key: key, cfg: cfg, tel: newTelemetry(&cfg), log: cfg.logger}
}

func (m *middleware) wrap(next asynq.Handler) asynq.Handler {
	if next == nil {
		panic("asynqlock: nil handler")
	}
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		return m.process(ctx, task, next)
	})
}

// errPanicked ends the span of a task whose key function or handler panicked; asynq
// recovers the panic and reports it.
var errPanicked = errors.New("asynqlock: panicked")

func (m *middleware) process(ctx context.Context, task *asynq.Task, next asynq.Handler) (err error) {
	ctx = m.tel.extract(ctx, task)
	ctx, span := m.tel.start(ctx, task.Type())
	var lk *dlock.Lock
	defer func() {
		// asynq recovers panics, of the key function (user code with keyfunc.From) or of the
		// handler; the lock must not stay held (and renewed) after one, nor the span open.
		// The panic is not recovered here, so asynq reports it from where it was raised.
		if !span.ended {
			if lk != nil {
				_ = lk.Release(context.WithoutCancel(ctx)) // the panic is the error that matters
			}
			span.end(OutcomePanicked, errPanicked)
		}
	}()

	src := newSource(ctx, task, m.cfg.maxPayload)
	key, kerr := m.key.Key(src)
	if kerr != nil && keyfunc.IsInputError(kerr) {
		err = fmt.Errorf("asynqlock: task %q not run, its lock key cannot be derived: %w: %w", task.Type(), kerr, asynq.SkipRetry)
		span.waited(OutcomeInvalid)
		span.end(OutcomeInvalid, invalidKeyError(kerr))
		return err
	}
	if kerr != nil { // a From function's own failure: a retry may succeed
		err = fmt.Errorf("asynqlock: task %q not run, deriving its lock key failed: %w", task.Type(), kerr)
		span.waited(OutcomeError)
		// The span gets a fixed text: the function's own error may hold payload data
		// (keyfunc's errors name parts, never values). asynq keeps the whole error.
		span.end(OutcomeError, errKeyFunc)
		return err
	}
	span.key(key)

	lk, out, err := m.acquire(ctx, key, task)
	span.waited(out)
	if lk == nil {
		var fail error
		if out != OutcomeBusy && out != OutcomeReplayed {
			fail = err
		}
		span.end(out, fail)
		return err
	}

	hctx := dlock.WithLock(ctx, lk)
	if !src.slot.IsZero() {
		hctx = context.WithValue(hctx, slotKey{}, src.slot)
	}
	herr := next.ProcessTask(hctx, task)
	return m.finish(ctx, task, lk, herr, span)
}

// deadlineMargin is how long before the task's deadline a wait for the lock gives up (a
// tenth of the time left when that is less, but never under minDeadlineMargin), so that the
// middleware answers busy while asynq still listens: asynq fails a task whose context ends
// before its handler returns with the deadline's error, its retry spent and WithBusy ignored.
const deadlineMargin = 500 * time.Millisecond

// minDeadlineMargin is the least margin, however little time is left. A wait does not end
// the instant its bound passes: dlock then takes the waiter out of line and, when the store
// has been quiet, probes it, a round trip or two that it bounds by 100 ms. A tenth of under
// a second left is less than that, and the busy answer came after the deadline, too late for
// asynq. A task with less time left than this does not wait: one look decides.
const minDeadlineMargin = 300 * time.Millisecond

// maxWait is how long a wait for the lock may last, from now: WithWait, but ending no later
// than the margin before the task's deadline; 0 when there is no time to wait (then one look
// decides). It reads the clock once, so a positive answer stays positive: a bound that ran
// out between two reads would be WithMaxWait(0), no bound at all.
func (m *middleware) maxWait(ctx context.Context) time.Duration {
	if m.cfg.wait <= 0 {
		return 0
	}
	wait := m.cfg.wait
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		wait = min(wait, left-min(deadlineMargin, max(minDeadlineMargin, left/10)))
	}
	return max(wait, 0)
}

// acquire takes the lock, mapping every way of not getting it to the error the task returns.
func (m *middleware) acquire(ctx context.Context, key string, task *asynq.Task) (*dlock.Lock, string, error) {
	var opts []dlock.AcquireOption
	if m.cfg.done {
		opts = append(opts, dlock.SkipCompleted())
	}
	var lk *dlock.Lock
	var err error
	if wait := m.maxWait(ctx); wait > 0 {
		// WithMaxWait: a wait shorter than a Redis round trip still takes a free lock, and a
		// store that does not answer still fails the look (ErrUnavailable).
		lk, err = m.client.Acquire(ctx, key, append(opts, dlock.WithMaxWait(wait))...)
	} else {
		lk, err = m.client.TryAcquire(ctx, key, opts...)
	}
	var ce *dlock.CompletedError
	switch {
	case err == nil:
		return lk, OutcomeObtained, nil
	case errors.As(err, &ce):
		m.log.DebugContext(ctx, "asynqlock: task already done, acknowledged without running",
			"task_type", task.Type(), "key_hash", dlock.KeyHash(key), "done_by", string(ce.Record))
		return nil, OutcomeReplayed, nil
	case ctx.Err() != nil && !errors.Is(err, dlock.ErrUnavailable):
		// The task's own context ended the wait (a lock of an enclosing layer was lost, the
		// task was cancelled or ran out of time): that says nothing of who holds the lock, so
		// it is not busy, and WithBusy must not decide (RevokeTask would drop the task). The
		// error wraps the context's cause: an enclosing layer reports its loss, and asynq
		// retries under its normal policy. Dashboards see it apart from lock contention and
		// from store failures.
		return nil, OutcomeCanceled, fmt.Errorf("asynqlock: task %q not run: %w", task.Type(), context.Cause(ctx))
	case errors.Is(err, context.Canceled) && !errors.Is(err, dlock.ErrUnavailable):
		// A re-entry that raced the release of the hold it re-enters (the handler ended its
		// hold while work it started re-entered with its context): dlock answers as the
		// context will once that Release returns, which it has not yet. Nobody else holds
		// the key, so it is not busy either.
		return nil, OutcomeCanceled, fmt.Errorf("asynqlock: task %q not run: the lock hold it re-enters was released: %w", task.Type(), context.Canceled)
	case errors.Is(err, dlock.ErrNotObtained):
		locked := &ErrLocked{Key: key}
		// When asynq archives or drops the task no retry comes, so the error (which asynq
		// stores and hands to its ErrorHandler) names none: RetryIn stays 0.
		if !errors.Is(m.cfg.busy, asynq.SkipRetry) && !errors.Is(m.cfg.busy, asynq.RevokeTask) {
			locked.RetryIn = jittered(m.cfg.retryIn, m.cfg.retryJitter)
		}
		if m.cfg.busy != nil {
			return nil, OutcomeBusy, fmt.Errorf("%w: %w", locked, m.cfg.busy)
		}
		return nil, OutcomeBusy, locked
	case errors.Is(err, dlock.ErrInvalidKey):
		return nil, OutcomeInvalid, fmt.Errorf("asynqlock: task %q not run: %w: %w", task.Type(), err, asynq.SkipRetry)
	case errors.Is(err, dlock.ErrUnavailable):
		return nil, OutcomeUnavailable, fmt.Errorf("asynqlock: task %q not run: %w", task.Type(), err)
	}
	return nil, OutcomeError, fmt.Errorf("asynqlock: task %q not run: %w", task.Type(), err)
}

// jittered is d plus a random extra below frac×d, in whole milliseconds (the error's text
// stays short; asynq keeps whole seconds), and never past the largest Duration. Tasks busy
// on one key then come back spread out rather than all at once, to collide again.
func jittered(d time.Duration, frac float64) time.Duration {
	extra := time.Duration(math.MaxInt64) - d // the room left above d
	if s := float64(d) * frac; s < float64(extra) {
		extra = time.Duration(s) // s is below the room even where float64 rounded the room up
	}
	if extra <= 0 {
		return d
	}
	return d + rand.N(extra).Truncate(time.Millisecond)
}

// finish releases the lock after the handler returned herr, or records the done marker.
func (m *middleware) finish(ctx context.Context, task *asynq.Task, lk *dlock.Lock, herr error, span *taskSpan) error {
	rctx := context.WithoutCancel(ctx) // dlock bounds a release whose context cannot end
	keyHash := dlock.KeyHash(lk.Key())

	if lost := lk.Err(); errors.Is(lost, dlock.ErrLockLost) {
		_ = lk.Release(rctx) // reports the same loss; nothing is left to free
		return m.lost(ctx, task, keyHash, lost, herr, span)
	} else if lost != nil {
		// The handler ended the hold itself, with Complete (its own record, which later
		// duplicates are acknowledged by) or Release on the lock FromContext gives it, as
		// dlock allows: nothing is left to free or to record.
		if herr == nil && m.cfg.done {
			m.log.DebugContext(ctx, "asynqlock: the handler ended its hold itself; no done marker added",
				"task_type", task.Type(), "key_hash", keyHash)
		}
		span.end(OutcomeObtained, handlerFailure(span, herr))
		return herr
	}

	if herr == nil && m.cfg.done {
		id, _ := asynq.GetTaskID(ctx)
		err := lk.Complete(rctx, []byte(id), m.cfg.retention)
		if errors.Is(err, dlock.ErrLockLost) {
			// Lost before the watchdog noticed (someone else holds the key in Redis, or
			// nobody does): the handler may not have run alone, as on the Release path
			// below. A loss seen on our clock only, with Redis still holding the lock as
			// ours, stored the marker with the release: the retry then finds it.
			return m.lost(ctx, task, keyHash, err, herr, span)
		}
		if err != nil {
			// The handler succeeded while the lock was held, so the work is done; failing
			// the task now because Redis did not answer would make asynq run it again for
			// certain, which is exactly what the marker is there to prevent.
			m.log.ErrorContext(ctx, "asynqlock: done marker not recorded; a duplicate of this task may run again",
				"task_type", task.Type(), "key_hash", keyHash, "error", err)
			span.end(OutcomeObtained, fmt.Errorf("asynqlock: done marker not recorded: %w", err))
			return nil
		}
		span.end(OutcomeObtained, nil)
		return nil
	}

	spanErr := handlerFailure(span, herr) // what the span reports: a failure of the handler, then of the release
	if err := lk.Release(rctx); err != nil {
		if errors.Is(err, dlock.ErrLockLost) {
			// Lost before the watchdog noticed: the handler may not have run alone.
			return m.lost(ctx, task, keyHash, err, herr, span)
		}
		// The lock expires at the end of its lease, blocking the key until then; the
		// handler's result stands, and the span, which covers the release, shows the failure.
		m.log.WarnContext(ctx, "asynqlock: release failed; the lock expires with its lease",
			"task_type", task.Type(), "key_hash", keyHash, "error", err)
		rerr := fmt.Errorf("asynqlock: release failed; the lock expires with its lease: %w", err)
		if spanErr == nil {
			spanErr = rerr
		} else {
			spanErr = errors.Join(spanErr, rerr)
		}
	}
	span.end(OutcomeObtained, spanErr)
	return herr
}

// handlerFailure is herr when it is a failure the span reports (IsFailure), else nil. With
// asynq.RevokeTask the handler drops its task on purpose ("already done elsewhere"): asynq
// neither retries nor archives it, so the span gets the asynqlock.revoked attribute, not an
// error status. asynq.SkipRetry stays a failure: asynq archives the task as failed for good,
// and the span covers the handler that gave up.
func handlerFailure(span *taskSpan, herr error) error {
	if errors.Is(herr, asynq.RevokeTask) {
		span.revoked()
		return nil
	}
	if herr != nil && IsFailure(herr) {
		return herr
	}
	return nil
}

// lost is the task's error when its lease was lost while the handler ran: it wraps lockErr
// (matching dlock.ErrLockLost) and the handler's own error, if any, and asynq retries it
// under the normal policy. A handler error that would steer asynq otherwise (RevokeTask,
// SkipRetry, or an inner layer's busy *ErrLocked, which IsFailure does not count) is kept as
// text only: with the lock lost, the handler may not have run alone, whatever it said.
func (m *middleware) lost(ctx context.Context, task *asynq.Task, keyHash string, lockErr, herr error, span *taskSpan) error {
	err := fmt.Errorf("asynqlock: task %q lost its lock while running: %w", task.Type(), lockErr)
	var locked *ErrLocked
	switch {
	case herr == nil:
	case errors.Is(herr, asynq.RevokeTask), errors.Is(herr, asynq.SkipRetry), errors.As(herr, &locked):
		err = fmt.Errorf("%w (handler: %v)", err, herr)
	default:
		err = fmt.Errorf("%w (handler: %w)", err, herr)
	}
	m.log.WarnContext(ctx, "asynqlock: lock lost while the task ran", "task_type", task.Type(), "key_hash", keyHash)
	span.end(OutcomeLost, err)
	return err
}
