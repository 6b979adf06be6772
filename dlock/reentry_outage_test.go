package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
)

// Redis refuses dlock's calls for a moment (its user may run no script; the data stays)
// exactly as a re-entrant hold is released, then recovers before the outer hold's release.
// The inner Release reports ErrUnavailable and its hold, maybe left in Redis, is taken off in
// the background, tried again until Redis answers: the outer Release then frees the key, the
// lease ends as released (not lost), and another Client can take the key.
func TestFailedInnerReleaseDoesNotKeepTheKey(t *testing.T) {
	srv, rdb, c := setup(t)
	looks := newLookCounter() // counts the inner release's calls, the background ones included
	rdb.AddHook(looks)
	ctx := testContext(t, 30*time.Second)
	if err := rdb.Do(ctx, "ACL", "SETUSER", "admin", "on", ">pw", "+@all", "~*", "&*").Err(); err != nil {
		t.Fatal(err)
	}
	admin := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "admin", "pw" })
	refuseScripts := func(refuse bool) {
		rule := "+@all"
		if refuse {
			rule = "-@scripting"
		}
		if err := admin.Do(context.Background(), "ACL", "SETUSER", "default", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer refuseScripts(false)

	key := uniqueKey(t)
	outer, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.Acquire(dlock.WithLock(ctx, outer), key)
	if err != nil || inner.HoldCount() != 2 {
		t.Fatalf("re-entry: %v", err)
	}
	refuseScripts(true)
	if err := inner.Release(markLooks(ctx)); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("inner release while Redis refuses: %v, want ErrUnavailable", err)
	}
	// The background removal of the hold is refused too (its calls carry the release's
	// context) before Redis recovers.
	_, released := looks.counts()
	looks.wait(t, ctx, "a background removal of the inner hold refused", func(_, answered int) bool { return answered > released })
	refuseScripts(false)
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("outer release: %v", err)
	}
	select {
	case <-outer.Done():
	case <-ctx.Done():
		t.Fatal("every hold was released, but the lease goes on: the key stays locked")
	}
	if err := outer.Err(); errors.Is(err, dlock.ErrLockLost) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("lease ended with %v, want released", err)
	}
	lk, err := newClient(t, rdb).TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("another Client after the releases: %v, want the key free", err)
	}
	_ = lk.Release(ctx)
}
