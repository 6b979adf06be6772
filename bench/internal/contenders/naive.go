package contenders

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// naiveSleep is the pause of the naive loop between SET NX attempts.
const naiveSleep = 50 * time.Millisecond

// naive is the lock many services write by hand: SET key token NX PX in a sleep loop, and a
// release that GETs the key and DELs it when the token is still ours. The GET-compare-DEL is
// two commands, so a lock that expires between them can still be deleted from its next owner:
// this is the "careful" hand-written version, and it is still not safe.
type naive struct {
	rdb   *redis.Client
	lease time.Duration
}

func newNaive(rdb *redis.Client, cfg Config) *naive {
	return &naive{rdb: rdb, lease: leaseOr(cfg, 10*time.Second)}
}

func (n *naive) Name() string       { return Naive }
func (n *naive) Renews() bool       { return false }
func (n *naive) TopLevel() []string { return []string{"set", "get", "del", "pexpire"} }
func (n *naive) Close() error       { return nil }

func (n *naive) Settings() string {
	return fmt.Sprintf("SET NX PX %v, sleep %v between attempts; release = GET, compare token, DEL (two commands, not atomic); renewal = GET, compare, PEXPIRE", n.lease, naiveSleep)
}

func (n *naive) Acquire(ctx context.Context, key string) (Held, error) {
	token := rand.Text()
	timer := time.NewTimer(0)
	<-timer.C
	for {
		ok, err := n.rdb.SetNX(ctx, key, token, n.lease).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return naiveHeld{n, key, token}, nil
		}
		timer.Reset(naiveSleep)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

type naiveHeld struct {
	n          *naive
	key, token string
}

func (h naiveHeld) owned(ctx context.Context) error {
	v, err := h.n.rdb.Get(ctx, h.key).Result()
	if errors.Is(err, redis.Nil) || (err == nil && v != h.token) {
		return ErrLost
	}
	return err
}

func (h naiveHeld) Release(ctx context.Context) error {
	if err := h.owned(ctx); err != nil {
		return err
	}
	return h.n.rdb.Del(ctx, h.key).Err()
}

func (h naiveHeld) Refresh(ctx context.Context) error {
	if err := h.owned(ctx); err != nil {
		return err
	}
	return h.n.rdb.PExpire(ctx, h.key, h.n.lease).Err()
}
