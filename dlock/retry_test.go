package dlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// replayHook sends every script call twice, as go-redis does when a reply is lost on the
// network and it retries: the caller sees the second reply.
type replayHook struct{ replays atomic.Int64 }

func (h *replayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if name == "evalsha" || name == "eval" {
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.replays.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *replayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := next(ctx, cmds); err != nil {
			return err
		}
		h.replays.Add(1)
		return next(ctx, cmds)
	}
}

func TestScriptsSafeToRunTwice(t *testing.T) {
	srv, plain, _ := setup(t)
	rdb := srv.Client(t)
	hook := &replayHook{}
	rdb.AddHook(hook)
	c := newClient(t, rdb)
	other := newClient(t, plain)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	// An acquire whose first reply was lost still reports the lock it took.
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire replayed: %v", err)
	}
	lctx := dlock.WithLock(ctx, outer)
	var holds []*dlock.Lock
	for range 3 {
		in, err := c.Acquire(lctx, key)
		if err != nil {
			t.Fatalf("re-entry replayed: %v", err)
		}
		holds = append(holds, in)
	}
	lockKey := lockKeyOf(t, plain, key)
	// Fields: owner, token and one per hold: a replayed re-entry did not count twice.
	if n := plain.HLen(ctx, lockKey).Val() - 2; n != 4 || outer.HoldCount() != 4 {
		t.Fatalf("holds in Redis %d, local %d, want 4", n, outer.HoldCount())
	}
	if err := outer.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("refresh replayed: %v", err)
	}
	for i, in := range holds {
		if err := in.Release(ctx); err != nil {
			t.Fatalf("release %d replayed: %v", i, err)
		}
		if _, err := other.TryAcquire(ctx, key); err == nil {
			t.Fatalf("key freed after %d of 4 releases", i+1)
		}
	}
	// The last release, replayed, answers released rather than lost.
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("final release replayed: %v", err)
	}
	if plain.Exists(ctx, lockKey).Val() != 0 {
		t.Fatal("lock key left after the same number of releases as acquisitions")
	}
	if hook.replays.Load() < 9 {
		t.Fatalf("only %d script calls were replayed", hook.replays.Load())
	}
	lk, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lk.Release(ctx)
}
