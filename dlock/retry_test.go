package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/locktest"
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

// hooked starts a test's Redis and returns a dlock Client whose Redis client runs hook, and
// a plain client (no hook) to look at Redis and to act as a rival.
func hooked(t *testing.T, hook redis.Hook) (plain *redis.Client, c *dlock.Client) {
	t.Helper()
	srv, plain, _ := setup(t)
	rdb := srv.Client(t)
	rdb.AddHook(hook)
	return plain, newClient(t, rdb)
}

// outerHold takes key on c and returns the lock with a context that carries it, for re-entry.
func outerHold(t *testing.T, ctx context.Context, c *dlock.Client, key string) (*dlock.Lock, context.Context) {
	t.Helper()
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return outer, dlock.WithLock(ctx, outer)
}

func TestScriptsSafeToRunTwice(t *testing.T) {
	hook := &replayHook{}
	plain, c := hooked(t, hook)
	other := newClient(t, plain)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	// An acquire whose first reply was lost still reports the lock it took.
	outer, lctx := outerHold(t, ctx, c, key)
	var holds []*dlock.Lock
	for range 3 {
		in, err := c.Acquire(lctx, key)
		if err != nil {
			t.Fatalf("re-entry replayed: %v", err)
		}
		holds = append(holds, in)
	}
	lockKey := lockKeyOf(t, plain, key)
	// One field per hold: a replayed re-entry did not count twice.
	if _, n := locktest.Holds(t, plain, lockKey); n != 4 || outer.HoldCount() != 4 {
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
	if owner, n := locktest.Holds(t, plain, lockKey); owner != "" || n != 0 {
		t.Fatalf("lock held by %q with %d holds after as many releases as acquisitions", owner, n)
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

// failAfterHook runs a script call and then reports a network error, as when the reply is lost
// and the client gives up: the caller sees an error although Redis applied the call.
type failAfterHook struct{ armed atomic.Bool }

func (h *failAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := strings.ToLower(cmd.Name()); (name == "evalsha" || name == "eval") && h.armed.Swap(false) {
			cmd.SetErr(errReplyLost)
			return errReplyLost
		}
		return err
	}
}
func (h *failAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var errReplyLost = errors.New("read tcp: connection reset by peer")

// Holds may be released in any order: the outer (first) hold before the inner ones, each
// release run twice, counts each hold off once and frees the key only at the last one.
func TestOuterReleasedFirstRunTwice(t *testing.T) {
	plain, c := hooked(t, &replayHook{})
	other := newClient(t, plain)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	outer, lctx := outerHold(t, ctx, c, key)
	inner1, err := c.Acquire(lctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner2, err := c.Acquire(lctx, key)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := lockKeyOf(t, plain, key)
	for i, step := range []struct {
		lk   *dlock.Lock
		left int
	}{{outer, 2}, {inner2, 1}} {
		if err := step.lk.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		if owner, n := locktest.Holds(t, plain, lockKey); owner == "" || n != step.left {
			t.Fatalf("after release %d: owner %q, holds %d, want %d", i, owner, n, step.left)
		}
		if _, err := other.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("after release %d of 3 another owner got the key: %v", i+1, err)
		}
	}
	if err := inner1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, n := locktest.Holds(t, plain, lockKey); owner != "" || n != 0 {
		t.Fatalf("after the last release: owner %q, holds %d", owner, n)
	}
	if fields := plain.HKeys(ctx, lockKey).Val(); len(fields) != 4 {
		t.Fatalf("fields of the released lock %v, want o, t, r, h only", fields)
	}
	lk, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("after the last release: %v", err)
	}
	if lk.Token() <= outer.Token() {
		t.Fatalf("token %d after %d", lk.Token(), outer.Token())
	}
	_ = lk.Release(ctx)
}

// A re-entry whose reply was lost: the caller gets an error, Redis had added the hold. The
// hold count must equal the successful calls, and as many releases free the key.
func TestReentryReplyLost(t *testing.T) {
	hook := &failAfterHook{}
	plain, c := hooked(t, hook)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)

	outer, lctx := outerHold(t, ctx, c, key)
	// Load the script first, so the armed call is the one that runs it.
	warm, err := c.Acquire(lctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	hook.armed.Store(true)
	if _, err := c.Acquire(lctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("re-entry with a lost reply: %v, want ErrUnavailable", err)
	}
	inner, err := c.Acquire(lctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if outer.HoldCount() != 2 {
		t.Fatalf("local holds %d, want 2 (two successful calls)", outer.HoldCount())
	}
	lockKey := lockKeyOf(t, plain, key)
	deadline := time.Now().Add(3 * time.Second)
	for _, n := locktest.Holds(t, plain, lockKey); n != 2; _, n = locktest.Holds(t, plain, lockKey) {
		if time.Now().After(deadline) {
			t.Fatalf("holds in Redis %d, want 2", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = inner.Release(ctx)
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if owner, n := locktest.Holds(t, plain, lockKey); owner != "" || n != 0 {
		t.Fatalf("lock held by %q with %d holds after as many releases as successful acquisitions", owner, n)
	}
}

// An acquire whose reply was lost leaves no lock behind that its caller does not know of.
func TestAcquireReplyLost(t *testing.T) {
	hook := &failAfterHook{}
	plain, c := hooked(t, hook)
	other := newClient(t, plain)
	ctx := testContext(t, 10*time.Second)
	key := uniqueKey(t)
	warm, err := c.Acquire(ctx, uniqueKey(t)) // load the script
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	hook.armed.Store(true)
	if _, err := c.Acquire(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("acquire with a lost reply: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lk, err := other.Acquire(wctx, key) // far less than the 30 s lease: the ghost was removed
	if err != nil {
		t.Fatalf("a ghost lock blocks the key: %v", err)
	}
	_ = lk.Release(ctx)
}
