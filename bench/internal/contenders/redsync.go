package contenders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

type redsyncC struct {
	rs    *redsync.Redsync
	lease time.Duration // 0: the NewMutex default (8 s)
}

func newRedsync(rdb *redis.Client, cfg Config) *redsyncC {
	return &redsyncC{rs: redsync.New(goredis.NewPool(rdb)), lease: cfg.Lease}
}

func (r *redsyncC) Name() string { return Redsync }
func (r *redsyncC) Renews() bool { return false }

// TopLevel: the mutex takes the lock with a plain SET NX; its scripts only run GET, DEL and
// PEXPIRE inside Redis.
func (r *redsyncC) TopLevel() []string { return []string{"set", "eval", "evalsha"} }
func (r *redsyncC) Close() error       { return nil }

func (r *redsyncC) Settings() string {
	lease := "expiry 8 s"
	if r.lease > 0 {
		lease = fmt.Sprintf("WithExpiry(%v)", r.lease)
	}
	return "NewMutex defaults (32 tries, random 50-250 ms between tries, " + lease + "); LockContext, called again after ErrFailed until the context ends; UnlockContext; renewal by ExtendContext"
}

func (r *redsyncC) mutex(key string) *redsync.Mutex {
	if r.lease > 0 {
		return r.rs.NewMutex(key, redsync.WithExpiry(r.lease))
	}
	return r.rs.NewMutex(key)
}

// Acquire calls LockContext again when its 32 tries run out, as redsync's doc suggests
// ("you may retry to acquire the lock by calling this method again").
func (r *redsyncC) Acquire(ctx context.Context, key string) (Held, error) {
	for {
		m := r.mutex(key)
		err := m.LockContext(ctx)
		if err == nil {
			return redsyncHeld{m}, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var taken *redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
			return nil, err
		}
	}
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if !ok && (err == nil || errors.Is(err, redsync.ErrLockAlreadyExpired)) {
		return ErrLost
	}
	return err
}

func (h redsyncHeld) Refresh(ctx context.Context) error {
	ok, err := h.m.ExtendContext(ctx)
	if err == nil && !ok {
		return ErrLost
	}
	return err
}
