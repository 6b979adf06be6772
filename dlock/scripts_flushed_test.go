package dlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
)

// A server that lost its scripts (restarted, failed over, SCRIPT FLUSH) answers NOSCRIPT to
// their SHA: every script is then sent in full, once, and the step it carries works, from
// taking a lock through re-entry, renewal, joining and leaving the line to the release.
func TestFlushedScriptsAreSentInFull(t *testing.T) {
	_, rdb, c := setup(t)
	ctx := testContext(t, 30*time.Second)
	key := uniqueKey(t)
	flush := func() {
		t.Helper()
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	evals := func() int {
		t.Helper()
		return commandCalls(t, rdb)["eval"]
	}
	start := evals()

	flush()
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire after SCRIPT FLUSH: %v", err)
	}
	flush()
	inner, err := c.Acquire(dlock.WithLock(ctx, lk), key)
	if err != nil {
		t.Fatalf("re-entry after SCRIPT FLUSH: %v", err)
	}
	if n := inner.HoldCount(); n != 2 {
		t.Fatalf("re-entry after SCRIPT FLUSH: %d holds, want 2", n)
	}
	flush()
	if err := lk.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("Refresh after SCRIPT FLUSH: %v", err)
	}
	if pttl := rdb.PTTL(ctx, lockKeyOf(t, rdb, key)).Val(); pttl < 50*time.Second {
		t.Fatalf("lock hash expires in %v after a Refresh to 1m", pttl)
	}
	flush()
	other := newClient(t, rdb)
	if _, err := other.Acquire(ctx, key, dlock.WithMaxWait(100*time.Millisecond)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a second owner's wait on the held lock: %v, want ErrNotObtained", err)
	}
	if n := rdb.ZCard(ctx, dlock.DefaultPrefix+":{"+key+"}:q").Val(); n != 0 {
		t.Fatalf("%d waiters left in line after the wait ended, want none", n)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatalf("inner Release: %v", err)
	}
	flush()
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release after SCRIPT FLUSH: %v", err)
	}
	next, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if next.Token() <= lk.Token() {
		t.Fatalf("token %d after token %d", next.Token(), lk.Token())
	}
	_ = next.Release(ctx)

	// acquire, reenter, renew, acquire+leave for the waiter, release: each sent in full once.
	if got := evals() - start; got < 5 {
		t.Fatalf("%d scripts sent in full, want at least 5 (one after each flush)", got)
	}
}
