package dlock

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the Client options.
const (
	DefaultLease         = 30 * time.Second
	DefaultRetryInterval = time.Second
	DefaultPrefix        = "lockguard"
)

// Option configures a Client. A nil Option is skipped.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	replicas       int
	replicaWait    time.Duration
	lease          time.Duration
	retry          time.Duration
	prefix         string
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	// ownerPrefix is set by New, not by an option: the start that every owner id of the
	// Client shares (see ownerIDs); "" when unknown.
	ownerPrefix string
}

// WithLease sets the lease of locks acquired without WithTTL. Such locks are renewed by the
// Client's watchdog every lease/3 while held. Default DefaultLease (30 s); values below
// MinLease are raised to MinLease.
func WithLease(d time.Duration) Option {
	return optionFunc(func(c *config) { c.lease = max(d, MinLease) })
}

// MinLease is the shortest lease a lock gets (WithLease, WithTTL) or a Refresh sets: the
// holder counts its lease 1% plus 2 ms short of Redis's (clock drift), so a shorter one would
// be over on the holder's clock about as soon as it began.
const MinLease = 30 * time.Millisecond

// WithRetryInterval sets how often a waiter looks at the lock again when no release message
// reached it (a lost message, an expired holder). A queued waiter that stops looking for three
// intervals is dropped from the line, and a lock handed to a waiter that never confirms it is
// freed after three intervals. Default DefaultRetryInterval (1 s); minimum 10 ms, maximum
// one hour (three intervals must stay a representable duration).
func WithRetryInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.retry = min(max(d, 10*time.Millisecond), time.Hour) })
}

// WithPrefix sets the prefix of every Redis key and channel the Client uses. Default
// DefaultPrefix ("lockguard"). Braces are escaped so the prefix cannot change a key's slot.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix = escapeTag(p) })
}

// WithTracerProvider sets the provider of the tracer for dlock.acquire spans. Default: the
// global provider (otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider sets the provider of the meter for lock metrics. Default: the global
// provider (otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithReplicaAck makes an acquisition count only once n replicas have acknowledged it (Redis
// WAIT, sent in the same pipeline as the acquire script, so it is still one round trip plus the
// replication delay; two, each waiting up to timeout, when the node answers that it does not
// have the script yet and both are sent again). A lock not acknowledged within timeout is released again and the call
// returns an error matching ErrUnavailable. A lock handed to a waiter is confirmed the same way
// before the waiter gets it. This narrows the window in which a failover loses a fresh lock; it
// does not close it (WAIT does not make Redis strongly consistent). Default: off; n <= 0 turns
// it off. A timeout under 1 ms is 1 ms: WAIT's 0 (wait for ever) is not offered, since a lock
// call must end. Works with a *redis.Client (also a failover client) and a *redis.ClusterClient.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return optionFunc(func(c *config) {
		c.replicas, c.replicaWait = max(n, 0), max(timeout, time.Millisecond)
	})
}

// WithLogger sets a logger for events a caller cannot see in return values: lost locks,
// failed renewals, failed clean-ups. Default: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// AcquireOption configures one acquisition. A nil AcquireOption is skipped.
type AcquireOption interface{ applyAcquire(*acquireConfig) }

type acquireOptionFunc func(*acquireConfig)

func (f acquireOptionFunc) applyAcquire(c *acquireConfig) { f(c) }

type acquireConfig struct {
	ttl           time.Duration
	skipCompleted bool
	maxWait       time.Duration
}

// WithTTL gives this acquisition a fixed lease of d with no watchdog renewal (like Redisson's
// leaseTime): the lock expires d after it was obtained unless Refresh extends it, and Done
// closes then. Without it the lock gets the Client lease, renewed while held. d <= 0 means
// that default (as ginlock.WithTTL(0) does), so a setting left at zero never makes every lock
// a lost one; positive values below MinLease are raised to MinLease.
func WithTTL(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) {
		c.ttl = 0
		if d > 0 {
			c.ttl = max(d, MinLease)
		}
	})
}

// WithMaxWait bounds how long Acquire waits for a busy lock to d, besides its context: when d
// runs out, Acquire fails with an error matching ErrNotObtained and context.DeadlineExceeded,
// as when the context's deadline ends a wait. The first look at the lock is not cut short by
// d: it gets at least FirstLook (plus twice the replica timeout with WithReplicaAck), so a d
// shorter than a Redis round trip still takes a free lock, and a store that does not answer
// or acknowledge still fails with ErrUnavailable. A lock found busy is waited for until d has
// passed since the call. d <= 0 means no bound but the context's: a bound computed from a
// deadline must not fall to zero unnoticed. TryAcquire ignores it.
func WithMaxWait(d time.Duration) AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.maxWait = max(d, 0) })
}

// FirstLook is the least time the first look of an Acquire with WithMaxWait gets.
const FirstLook = time.Second

// SkipCompleted makes the acquisition fail with a *CompletedError (matching ErrCompleted)
// when a record stored by Complete exists for the key, instead of taking the lock. The check
// is made by the same script that takes the lock, so work completed by one holder is never
// started again by the next.
func SkipCompleted() AcquireOption {
	return acquireOptionFunc(func(c *acquireConfig) { c.skipCompleted = true })
}
