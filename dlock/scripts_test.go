package dlock

import (
	"context"
	"testing"
	"time"

	"github.com/lockguard/lockguard/internal/redistest"
)

// The scripts, driven one call at a time (no client loop, no timers), on the case that no
// client test can time: a lock whose holder's lease ran out while a waiter that skips completed
// work stands in line ahead of a plain waiter, and the work was completed meanwhile. The plain
// waiter, looking first, must get the lock in that very call (the skipping one is told to look
// again), not be put back in line behind itself; after its release the key is free at once.
func TestScriptLeaseRunOutSkippingWaiterAhead(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	be := newRedisBackend(rdb, &config{lease: time.Minute, retry: 200 * time.Millisecond, prefix: "lockguard"})
	t.Cleanup(func() { _ = be.close() })
	const key = "k"
	keys, _ := be.keys(key)

	req := func(owner string, wait, skip bool) acquireRequest {
		return acquireRequest{key: key, owner: owner, ttl: time.Minute, wait: wait, skipCompleted: skip}
	}
	holder := req("holder", false, false)
	holder.ttl = 150 * time.Millisecond
	if res, err := be.acquire(ctx, holder); err != nil || res.status != statusObtained {
		t.Fatalf("holder: %+v %v", res, err)
	}
	for _, r := range []acquireRequest{req("skipper", true, true), req("plain", true, false)} {
		if res, err := be.acquire(ctx, r); err != nil || res.status != statusBusy {
			t.Fatalf("%s: %+v %v, want busy and in line", r.owner, res, err)
		}
	}
	if err := rdb.Set(ctx, keys[3], "done", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // the holder's lease runs out

	res, err := be.acquire(ctx, req("plain", true, false))
	if err != nil || res.status != statusObtained {
		t.Fatalf("plain waiter after the lease ran out: %+v %v, want obtained", res, err)
	}
	if res.pttl <= 0 || res.pttl > be.claim {
		t.Fatalf("plain waiter's lease %v, want the claim lease (at most %v) until it confirms", res.pttl, be.claim)
	}
	if n := rdb.ZCard(ctx, keys[1]).Val(); n != 0 {
		t.Fatalf("%d left in line, want none (the skipper told to look again, the plain waiter served)", n)
	}
	if res, err := be.acquire(ctx, req("skipper", true, true)); err != nil || res.status != statusCompleted {
		t.Fatalf("skipper: %+v %v, want completed", res, err)
	}
	rel, err := be.release(ctx, releaseRequest{key: key, owner: "plain", entry: "1"})
	if err != nil || !rel.owned || rel.left != 0 || rel.next.owner != "" {
		t.Fatalf("release: %+v %v, want a full release handing off to nobody", rel, err)
	}
	if res, err := be.acquire(ctx, req("probe", false, false)); err != nil || res.status != statusObtained {
		t.Fatalf("probe after the release: %+v %v, want obtained", res, err)
	}
}
