package dlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/internal/redistest"
)

// The scripts, driven one call at a time (no client loop, no timers), on the case that no
// client test can time: a lock whose holder's lease ran out while a waiter that skips completed
// work stands in line ahead of a plain waiter, and the work was completed meanwhile. The plain
// waiter, looking first, must get the lock in that very call (the skipping one is told to look
// again), not be put back in line behind itself; after its release the key is free at once.
func TestScriptLeaseRunOutSkippingWaiterAhead(t *testing.T) {
	rig := newScriptRig(t)
	rdb, be, key, keys := rig.rdb, rig.be, rig.key, rig.keys
	ctx := context.Background()

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

// scriptRig is a Redis backend driven one script call at a time.
type scriptRig struct {
	t    *testing.T
	rdb  *redis.Client
	be   *redisBackend
	key  string
	keys []string
}

func newScriptRig(t *testing.T) *scriptRig {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	be := newRedisBackend(rdb, &config{lease: time.Minute, retry: 200 * time.Millisecond, prefix: "lockguard"})
	t.Cleanup(func() { _ = be.close() })
	keys, _ := be.keys("k")
	return &scriptRig{t: t, rdb: rdb, be: be, key: "k", keys: keys}
}

func (r *scriptRig) acquire(owner string, wait bool) acquireResult {
	r.t.Helper()
	res, err := r.be.acquire(context.Background(), acquireRequest{key: r.key, owner: owner, ttl: time.Minute, wait: wait})
	if err != nil {
		r.t.Fatalf("acquire %s: %v", owner, err)
	}
	return res
}

func (r *scriptRig) release(owner string) releaseResult {
	r.t.Helper()
	res, err := r.be.release(context.Background(), releaseRequest{key: r.key, owner: owner, entry: "1"})
	if err != nil || !res.owned {
		r.t.Fatalf("release %s: %+v %v", owner, res, err)
	}
	return res
}

// leave runs leave.lua for owner, an acquisition with ttl that gave up.
func (r *scriptRig) leave(owner string, ttl time.Duration) {
	r.t.Helper()
	if _, err := r.be.leave(context.Background(), acquireRequest{key: r.key, owner: owner, ttl: ttl}); err != nil {
		r.t.Fatalf("leave %s: %v", owner, err)
	}
}

// releaseToNobody releases owner's lock with the line marked but empty: nobody is handed the
// lock, and the release clears the marker.
func (r *scriptRig) releaseToNobody(owner string) {
	r.t.Helper()
	if rel := r.release(owner); rel.next.owner != "" {
		r.t.Fatalf("%s's release handed off to %q from an empty line", owner, rel.next.owner)
	}
	if w := r.field("w"); w != "0" {
		r.t.Fatalf("w = %q after a release found the line empty, want 0", w)
	}
}

// field reads one field of the lock hash ("" when absent).
func (r *scriptRig) field(name string) string {
	r.t.Helper()
	v, err := r.rdb.HGet(context.Background(), r.keys[0], name).Result()
	if err != nil && err != redis.Nil {
		r.t.Fatal(err)
	}
	return v
}

// The line marker w: a waiter joining sets it, so the release looks at the line; a dead waiter
// at the head of the line is dropped and the next live one served; a marker left by a waiter
// that gave up costs the next release one look at an empty line, which clears it.
func TestScriptLineMarker(t *testing.T) {
	r := newScriptRig(t)
	ctx := context.Background()
	if res := r.acquire("holder", false); res.status != statusObtained {
		t.Fatalf("holder: %+v", res)
	}
	if w := r.field("w"); w == "1" {
		t.Fatal("a lock nobody waits for is marked as having a line")
	}
	for _, owner := range []string{"dead", "live"} {
		if res := r.acquire(owner, true); res.status != statusBusy {
			t.Fatalf("%s: %+v, want busy and in line", owner, res)
		}
	}
	if w := r.field("w"); w != "1" {
		t.Fatalf("w = %q after waiters joined, want 1", w)
	}
	// The first waiter's process died: its liveness deadline has passed.
	dead := r.be.member(acquireRequest{owner: "dead", ttl: time.Minute})
	if err := r.rdb.ZAddXX(ctx, r.keys[2], redis.Z{Score: 1, Member: dead}).Err(); err != nil {
		t.Fatal(err)
	}
	rel := r.release("holder")
	if rel.next.owner != "live" {
		t.Fatalf("hand-off to %q, want the live waiter behind the dead one", rel.next.owner)
	}
	for _, k := range r.keys[1:3] {
		if n := r.rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("%s still exists after the line was served: %v", k, r.rdb.ZRange(ctx, k, 0, -1).Val())
		}
	}
	r.releaseToNobody("live")

	// A waiter joins and gives up: the marker stays until the next release clears it.
	if res := r.acquire("holder2", false); res.status != statusObtained {
		t.Fatalf("holder2: %+v", res)
	}
	quitter := acquireRequest{key: r.key, owner: "quitter", ttl: time.Minute, wait: true}
	if res := r.acquire("quitter", true); res.status != statusBusy {
		t.Fatalf("quitter: %+v", res)
	}
	if h, err := r.be.leave(ctx, quitter); err != nil || h.owner != "" {
		t.Fatalf("leave: %+v %v", h, err)
	}
	r.releaseToNobody("holder2")
	if res := r.acquire("probe", false); res.status != statusObtained {
		t.Fatalf("probe after the release: %+v, want obtained", res)
	}
}

// The common paths cost what docs/dlock.md says: taking a new key HMGET, EXISTS (line, and the
// record with SkipCompleted), TIME, HSET, PEXPIRE; taking a released one HMGET, TIME, HSET,
// PEXPIRE (every token reads the clock); releasing with nobody in line HMGET, HSET, and SET
// for a completion record (the HDEL that lets a release write when Redis is full is only sent
// after Redis refused a write). None of them reads the line itself.
func TestScriptCommonPathCalls(t *testing.T) {
	r := newScriptRig(t)
	ctx := context.Background()
	if err := r.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"a", "b"} {
		if res := r.acquire(owner, false); res.status != statusObtained {
			t.Fatalf("%s: %+v", owner, res)
		}
		r.release(owner)
	}
	// A new key taken by a caller that skips completed work: one EXISTS for record and line.
	skip := acquireRequest{key: "k2", owner: "c", ttl: time.Minute, skipCompleted: true}
	if res, err := r.be.acquire(ctx, skip); err != nil || res.status != statusObtained {
		t.Fatalf("skip completed on a new key: %+v %v", res, err)
	}
	if res, err := r.be.release(ctx, releaseRequest{key: "k2", owner: "c", entry: "1"}); err != nil || !res.owned {
		t.Fatalf("release k2: %+v %v", res, err)
	}
	// A release that stores a completion record adds its SET, and nothing else.
	done := acquireRequest{key: "k3", owner: "d", ttl: time.Minute}
	if res, err := r.be.acquire(ctx, done); err != nil || res.status != statusObtained {
		t.Fatalf("k3: %+v %v", res, err)
	}
	complete := releaseRequest{key: "k3", owner: "d", entry: "1", storeRecord: true, record: []byte("done"), retention: time.Minute}
	if res, err := r.be.release(ctx, complete); err != nil || !res.owned {
		t.Fatalf("complete k3: %+v %v", res, err)
	}
	stats, err := r.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		got[strings.TrimPrefix(name, "cmdstat_")] = calls
	}
	want := map[string]string{"hmget": "8", "hset": "8", "pexpire": "4", "exists": "3", "time": "4", "set": "1"}
	for cmd, n := range want {
		if got[cmd] != n {
			t.Errorf("%s called %q times, want %s", cmd, got[cmd], n)
		}
	}
	for _, cmd := range []string{"hdel", "zadd", "zpopmin", "zrange", "zscore", "zrem", "ttl", "pttl"} {
		if got[cmd] != "" {
			t.Errorf("%s called %s times on the common paths", cmd, got[cmd])
		}
	}
}

// A release whose first write fails for a reason other than a full Redis (here an ACL user
// that may not run HSET) fails with Redis's error, not a retry of it as if Redis were full,
// and changes nothing: the lock is still held by its owner.
func TestReleaseWriteErrorKeepsRedisError(t *testing.T) {
	r := newScriptRig(t)
	ctx := context.Background()
	if res := r.acquire("a", false); res.status != statusObtained {
		t.Fatalf("a: %+v", res)
	}
	if err := r.rdb.Do(ctx, "ACL", "SETUSER", "nohset", "on", ">pw", "~*", "&*", "+@all", "-hset").Err(); err != nil {
		t.Fatal(err)
	}
	opts := *r.rdb.Options()
	opts.Username, opts.Password = "nohset", "pw"
	limited := redis.NewClient(&opts)
	t.Cleanup(func() { _ = limited.Close() })
	be := newRedisBackend(limited, &config{lease: time.Minute, retry: 200 * time.Millisecond, prefix: "lockguard"})
	t.Cleanup(func() { _ = be.close() })
	_, err := be.release(ctx, releaseRequest{key: r.key, owner: "a", entry: "1"})
	if err == nil || !strings.Contains(err.Error(), "can't run this command") {
		t.Fatalf("release by a user that may not run HSET = %v, want the ACL refusal", err)
	}
	if got := r.rdb.HGet(ctx, r.keys[0], "o").Val(); got != "a" {
		t.Fatalf("owner after the failed release = %q, want a", got)
	}
}

// leave records the owners that gave up (the last 8, newest first) and acquire refuses them,
// whether the lock is free, held or gone: a look still on its way when its acquisition gave
// up takes neither the lock nor a place in line. Other owners are served as before, and a
// lock hash leave had to make for the record expires.
func TestScriptGoneOwnersAreRefused(t *testing.T) {
	rig := newScriptRig(t)
	rdb, be, key, keys, leave := rig.rdb, rig.be, rig.key, rig.keys, rig.leave
	ctx := context.Background()

	// A key nobody ever locked: the record gets a hash of its own, for the acquisition's ttl.
	leave("gone-0", 300*time.Millisecond)
	if res := rig.acquire("gone-0", false); res.status != statusBusy {
		t.Fatalf("gone owner on a new key: %+v, want busy", res)
	}
	if pttl := rdb.PTTL(ctx, keys[0]).Val(); pttl <= 0 || pttl > 300*time.Millisecond {
		t.Fatalf("the record's hash has TTL %v, want the leaving acquisition's 300ms", pttl)
	}
	if res := rig.acquire("holder", false); res.status != statusObtained {
		t.Fatalf("another owner on a key with a record: %+v, want obtained", res)
	}
	for i := 1; i <= 9; i++ {
		leave(fmt.Sprintf("gone-%d", i), time.Minute)
	}
	want := "gone-9 gone-8 gone-7 gone-6 gone-5 gone-4 gone-3 gone-2"
	if g := rdb.HGet(ctx, keys[0], "g").Val(); g != want {
		t.Fatalf("g = %q, want the last 8 newest first: %q", g, want)
	}
	if res := rig.acquire("gone-5", true); res.status != statusBusy {
		t.Fatalf("gone owner on a held lock: %+v, want busy", res)
	}
	if n := rdb.ZCard(ctx, keys[1]).Val(); n != 0 {
		t.Fatalf("the gone owner joined the line: %d waiters", n)
	}
	if rel, err := be.release(ctx, releaseRequest{key: key, owner: "holder", entry: "1"}); err != nil || !rel.owned {
		t.Fatalf("release: %+v %v", rel, err)
	}
	if res := rig.acquire("gone-2", false); res.status != statusBusy {
		t.Fatalf("gone owner on a released lock: %+v, want busy", res)
	}
	// gone-1 dropped off the list: a late look of its would be served.
	if res := rig.acquire("gone-1", false); res.status != statusObtained {
		t.Fatalf("gone-1, off the list of 8: %+v, want obtained", res)
	}
}

// A second acquisition that gives up on the same free key with a shorter ttl does not cut the
// first one's record short: a look of the first, arriving after the second's ttl but within
// its own, is still refused (it would take a lock nobody releases).
func TestScriptGoneRecordOnlyLengthened(t *testing.T) {
	rig := newScriptRig(t)
	rig.leave("gone-long", time.Minute)
	rig.leave("gone-short", 100*time.Millisecond)
	if pttl := rig.rdb.PTTL(context.Background(), rig.keys[0]).Val(); pttl < 50*time.Second {
		t.Fatalf("the record's hash has TTL %v after the shorter leave, want gone-long's minute", pttl)
	}
	time.Sleep(250 * time.Millisecond) // a deliberate window: past gone-short's 100 ms
	if res := rig.acquire("gone-long", false); res.status != statusBusy {
		t.Fatalf("late look of gone-long after gone-short's ttl: %+v, want busy", res)
	}
	// A longer leave after a shorter one lengthens the record.
	rig.key = "k2"
	rig.keys, _ = rig.be.keys("k2")
	rig.leave("short", 100*time.Millisecond)
	rig.leave("long", time.Minute)
	if pttl := rig.rdb.PTTL(context.Background(), rig.keys[0]).Val(); pttl < 50*time.Second {
		t.Fatalf("the record's hash has TTL %v after the longer leave, want a minute", pttl)
	}
}
