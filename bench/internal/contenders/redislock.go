package contenders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// redislockBackoff is the interval of the retry example in bsm/redislock's examples
// (ExampleClient_Obtain_retry: LinearBackoff(100ms)); the attempt limit of that example is
// replaced by the caller's context deadline, as in ExampleClient_Obtain_customDeadline, so that
// Acquire blocks like the other contenders.
const redislockBackoff = 100 * time.Millisecond

type redislockC struct {
	c     *redislock.Client
	lease time.Duration
}

func newRedislock(rdb *redis.Client, cfg Config) *redislockC {
	return &redislockC{c: redislock.New(rdb), lease: leaseOr(cfg, 10*time.Second)}
}

func (r *redislockC) Name() string       { return Redislock }
func (r *redislockC) Renews() bool       { return false }
func (r *redislockC) TopLevel() []string { return []string{"eval", "evalsha"} }
func (r *redislockC) Close() error       { return nil }

func (r *redislockC) Settings() string {
	return fmt.Sprintf("Obtain with RetryStrategy LinearBackoff(%v) until the context deadline, ttl %v; Release; renewal by Lock.Refresh", redislockBackoff, r.lease)
}

func (r *redislockC) Acquire(ctx context.Context, key string) (Held, error) {
	lk, err := r.c.Obtain(ctx, key, r.lease, &redislock.Options{RetryStrategy: redislock.LinearBackoff(redislockBackoff)})
	if err != nil {
		return nil, err
	}
	return redislockHeld{lk, r.lease}, nil
}

type redislockHeld struct {
	lk    *redislock.Lock
	lease time.Duration
}

func (h redislockHeld) Release(ctx context.Context) error {
	err := h.lk.Release(ctx)
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	return err
}

func (h redislockHeld) Refresh(ctx context.Context) error {
	err := h.lk.Refresh(ctx, h.lease, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return ErrLost
	}
	return err
}
