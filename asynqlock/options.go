package asynqlock

import (
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the options.
const (
	DefaultRetryIn     = 5 * time.Second
	DefaultRetryJitter = 0.5     // a busy task's RetryIn is uniform in [d, 1.5d)
	DefaultMaxPayload  = 1 << 20 // bytes of payload a key function may read
)

// Option configures New and Wrap. A nil Option is skipped.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	retryIn        time.Duration
	retryJitter    float64
	wait           time.Duration
	busy           error
	busySet        bool
	waitSet        bool
	done           bool
	retention      time.Duration
	slot           time.Duration
	slotLoc        *time.Location
	maxPayload     int
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagator     propagation.TextMapPropagator
	logger         *slog.Logger
}

// WithRetryIn sets d, the least delay after which RetryDelay brings a busy task back:
// ErrLocked.RetryIn is d plus WithRetryJitter's random extra. Default DefaultRetryIn (5 s);
// values below 1 s are raised to 1 s. asynq stores retry times in whole seconds and moves due
// tasks every Config.DelayedTaskCheckInterval (5 s by default), so the task comes back between
// RetryIn-1s and RetryIn plus that interval.
func WithRetryIn(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retryIn = max(d, time.Second) })
}

// WithRetryJitter adds a random extra below frac×d to a busy task's RetryIn, d being
// WithRetryIn's delay: RetryIn is uniform in [d, (1+frac)×d), the extra in whole
// milliseconds, so tasks busy on one key come back spread out rather than all at once, to
// collide again. Default DefaultRetryJitter (0.5); 0 turns it off. asynq keeps retry times
// in whole seconds and moves due tasks every Config.DelayedTaskCheckInterval, so the spread
// shows only where it is wider than that interval. It panics if frac is negative, above 1 or
// NaN.
func WithRetryJitter(frac float64) Option {
	if !(frac >= 0 && frac <= 1) {
		panic("asynqlock: WithRetryJitter fraction must be between 0 and 1")
	}
	return optionFunc(func(c *config) { c.retryJitter = frac })
}

// WithWait makes a task whose lock is busy queue for it for up to d (dlock's Acquire, served
// in arrival order) before giving up as busy. The wait ends 500 ms before the task's deadline
// (a tenth of the time left when that is less, but at least 300 ms: a task with less left
// looks once and does not wait), so that asynq gets the busy answer rather than its own
// timeout, and it ends with the task's context. The first look at the lock gets at least a
// second whatever d (the task's deadline permitting), so a short d never makes a free lock
// look busy.
// Default 0: try once (TryAcquire) and report busy at once, freeing the worker; d <= 0 does
// the same, also under OncePerSlot, whose own wait it then replaces.
func WithWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.wait, c.waitSet = max(d, 0), true })
}

// WithBusy sets what a busy task returns on top of its *ErrLocked: asynq.SkipRetry archives
// it, asynq.RevokeTask drops it ("someone else is already doing exactly this"). Default nil:
// the task is retried after RetryIn (see IsFailure and RetryDelay). The returned error wraps
// both, so errors.As(err, new(*ErrLocked)) still answers true; with asynq.SkipRetry or
// asynq.RevokeTask its RetryIn is 0, as no retry follows. Any other error is wrapped the same
// way and steers nothing: the task is retried after RetryIn, as with nil.
func WithBusy(action error) Option {
	return optionFunc(func(c *config) { c.busy, c.busySet = action, true })
}

// WithDoneMarker records a task's key as done when its handler returns nil, kept for
// retention, in the same atomic step that releases the lock (dlock's Lock.Complete). A later
// task with the same key is acknowledged without running: the middleware returns nil and
// reports the outcome "replayed". The check is made by the script that takes the lock, so a
// redelivery racing the original can never run twice. A handler error records nothing.
// Default: off. retention must cover the window in which duplicates can arrive (asynq's
// retries included); retention <= 0 means DefaultRetention (24 h), and values below 1 s are
// raised to 1 s.
func WithDoneMarker(retention time.Duration) Option {
	return optionFunc(func(c *config) {
		c.done, c.retention = true, DefaultRetention
		if retention > 0 {
			c.retention = max(retention, time.Second)
		}
	})
}

// DefaultRetention is how long WithDoneMarker keeps a done marker when given no positive
// retention: 24 hours, as ginlock keeps stored responses.
const DefaultRetention = 24 * time.Hour

// WithMaxPayload caps the payload, in bytes, that the key function may read; a larger payload
// is invalid input (asynq.SkipRetry) when the key needs the payload. Default
// DefaultMaxPayload (1 MiB); n <= 0 removes the cap.
func WithMaxPayload(n int) Option {
	return optionFunc(func(c *config) { c.maxPayload = n })
}

// WithTracerProvider sets the provider of the tracer for asynqlock.lock spans. Default: the
// global provider (otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider sets the provider of the meter for the task and wait metrics. Default:
// the global provider (otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithPropagator sets the propagator that reads trace context from task headers. Default:
// the global one (otel.GetTextMapPropagator()), the one InjectTrace writes with.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.propagator = p })
}

// WithLogger sets a logger for events a caller cannot see in return values: replays, lost
// locks, done markers or releases that could not be written. Default: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

func newConfig(opts []Option) config {
	c := config{retryIn: DefaultRetryIn, retryJitter: DefaultRetryJitter, maxPayload: DefaultMaxPayload}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.slot > 0 {
		// Once-per-slot defaults, each overridable by the explicit option.
		if !c.done {
			c.done, c.retention = true, slotRetention(c.slot)
		}
		if !c.waitSet {
			c.wait = slotWait(c.slot)
		}
		if !c.busySet {
			c.busy = asynq.RevokeTask
		}
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}
