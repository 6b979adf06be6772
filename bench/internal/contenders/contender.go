package contenders

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Names of the contenders, in report order.
const (
	Lockguard = "lockguard"
	Redislock = "bsm/redislock"
	Redsync   = "redsync"
	Naive     = "naive"
)

// Names lists every contender, in report order.
var Names = []string{Lockguard, Redislock, Redsync, Naive}

// ErrLost is returned by Refresh and Release when the lock was no longer held by its owner.
var ErrLost = errors.New("contenders: lock lost")

// Config tunes a contender for a scenario.
type Config struct {
	// Lease is the lock's time to live. Zero means each library's default or README value:
	// lockguard 30 s renewed by its watchdog, redislock and naive 10 s, redsync 8 s.
	Lease time.Duration
}

// Contender is one lock library bound to one Redis client.
type Contender interface {
	// Name is one of Names.
	Name() string
	// Acquire blocks until it holds key, or ctx ends.
	Acquire(ctx context.Context, key string) (Held, error)
	// Renews reports whether the library renews held locks itself (a watchdog); the others
	// need a manual Refresh loop.
	Renews() bool
	// TopLevel lists the commands (as INFO commandstats names them) that this contender sends
	// as top-level requests and that its scripts never run inside Redis, so their commandstats
	// delta counts requests.
	TopLevel() []string
	// Settings describes the retry and lease settings used, for the report.
	Settings() string
	// Close stops background work of the library (not the Redis client).
	Close() error
}

// Held is one held lock.
type Held interface {
	// Release frees the lock.
	Release(ctx context.Context) error
	// Refresh extends the lease to the contender's lease; ErrLost when it was not held.
	Refresh(ctx context.Context) error
}

// New returns the named contender on rdb.
func New(name string, rdb *redis.Client, cfg Config) Contender {
	switch name {
	case Lockguard:
		return newLockguard(rdb, cfg)
	case Redislock:
		return newRedislock(rdb, cfg)
	case Redsync:
		return newRedsync(rdb, cfg)
	case Naive:
		return newNaive(rdb, cfg)
	}
	panic("contenders: unknown contender " + name)
}

func leaseOr(cfg Config, d time.Duration) time.Duration {
	if cfg.Lease > 0 {
		return cfg.Lease
	}
	return d
}
