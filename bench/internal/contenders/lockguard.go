package contenders

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockguard/lockguard/dlock"
	"github.com/redis/go-redis/v9"
)

type lockguard struct {
	c   *dlock.Client
	cfg Config
}

func newLockguard(rdb *redis.Client, cfg Config) *lockguard {
	var opts []dlock.Option
	if cfg.Lease > 0 {
		opts = append(opts, dlock.WithLease(cfg.Lease))
	}
	return &lockguard{c: dlock.New(rdb, opts...), cfg: cfg}
}

func (l *lockguard) Name() string       { return Lockguard }
func (l *lockguard) Renews() bool       { return true }
func (l *lockguard) TopLevel() []string { return []string{"eval", "evalsha"} }
func (l *lockguard) Close() error       { return l.c.Close() }

func (l *lockguard) Settings() string {
	return fmt.Sprintf("dlock.New defaults (queued hand-off by pub/sub, fallback look every %v), lease %v renewed by the watchdog every lease/3; Acquire + Release",
		dlock.DefaultRetryInterval, leaseOr(l.cfg, dlock.DefaultLease))
}

func (l *lockguard) Acquire(ctx context.Context, key string) (Held, error) {
	lk, err := l.c.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return lockguardHeld{lk}, nil
}

type lockguardHeld struct{ lk *dlock.Lock }

func (h lockguardHeld) Release(ctx context.Context) error {
	err := h.lk.Release(ctx)
	if errors.Is(err, dlock.ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return err
}

// Refresh reports whether the watchdog still holds the lock; it sends nothing.
func (h lockguardHeld) Refresh(context.Context) error {
	if h.lk.Err() != nil {
		return ErrLost
	}
	return nil
}
