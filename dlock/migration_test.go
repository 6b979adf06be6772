package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// slotMigration moves the hash slot of a lock key from its master to another one, as
// `redis-cli --cluster reshard` does: IMPORTING on the target, MIGRATING on the source (from
// then on Redis answers TRYAGAIN to scripts that name some absent keys), and, at finish, the
// keys moved with MIGRATE and the slot given to the target on every master.
type slotMigration struct {
	t              *testing.T
	slot           int64
	source, target *redis.Client
	sourceID       string
	targetID       string
	targetAddr     string
	masters        []*redis.Client
}

// The target is the first other master whose address is not in avoid.
func startSlotMigration(t *testing.T, ctx context.Context, cl *redistest.Cluster, key string, avoid ...string) *slotMigration {
	t.Helper()
	src, err := cl.MasterOf(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m := &slotMigration{t: t}
	for _, n := range cl.Nodes() {
		rdb := n.Client(t)
		if role, _ := rdb.Do(ctx, "ROLE").Slice(); len(role) == 0 || role[0] != "master" {
			continue // a replica
		}
		m.masters = append(m.masters, rdb)
		switch {
		case n == src:
			m.source = rdb
		case m.target == nil && !slices.Contains(avoid, n.Addr()):
			m.target, m.targetAddr = rdb, n.Addr()
		}
	}
	if m.slot, err = m.source.ClusterKeySlot(ctx, key).Result(); err != nil {
		t.Fatal(err)
	}
	if m.sourceID, err = m.source.ClusterMyID(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	if m.targetID, err = m.target.ClusterMyID(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	m.do(ctx, m.target, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.sourceID)
	m.do(ctx, m.source, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.targetID)
	return m
}

func (m *slotMigration) do(ctx context.Context, rdb *redis.Client, args ...any) {
	m.t.Helper()
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		m.t.Errorf("%v on %s: %v", args, rdb.Options().Addr, err)
	}
}

// finish moves the slot's keys and hands the slot to the target. It may run in a goroutine:
// it reports with Errorf.
func (m *slotMigration) finish(ctx context.Context) {
	keys, err := m.source.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Result()
	if err != nil {
		m.t.Errorf("CLUSTER GETKEYSINSLOT: %v", err)
		return
	}
	if len(keys) > 0 {
		host, port, _ := strings.Cut(m.targetAddr, ":")
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		m.do(ctx, m.source, args...)
	}
	for _, rdb := range m.masters {
		m.do(ctx, rdb, "CLUSTER", "SETSLOT", m.slot, "NODE", m.targetID)
	}
}

// TestSlotMigration: while a lock's slot moves to another node, Redis answers its scripts
// TRYAGAIN. A release and a waiting Acquire wait the migration out, instead of failing and
// leaving the lock held (and its line blocked) until the lease ends; TryAcquire does not
// wait: it is ErrUnavailable. Afterwards the lock works on its new node, tokens still rising.
func TestSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testContext(t, 60*time.Second)
	// The hooks count the release's and the waiting Acquire's calls (marked by markLooks) as
	// the Client sends them and gets their answers, after go-redis's own retries.
	holderRDB, waiterRDB := cl.Client(t), cl.Client(t)
	holderLooks, waiterLooks := newLookCounter(), newLookCounter()
	holderRDB.AddHook(holderLooks)
	waiterRDB.AddHook(waiterLooks)
	holder := newClient(t, holderRDB)
	waiter := newClient(t, waiterRDB)
	key := uniqueKey(t)

	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m := startSlotMigration(t, ctx, cl, key)

	if _, err := waiter.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire during the migration: %v, want ErrUnavailable", err)
	}

	wctx, cancel := context.WithTimeout(markLooks(ctx), 20*time.Second)
	defer cancel()
	waited := acquireOutcome(waiter, wctx, key)
	released := make(chan error, 1)
	go func() { released <- lk.Release(markLooks(ctx)) }()
	// The migration ends only once go-redis's own retries of both calls are over: each has
	// an answer (TRYAGAIN: the slot still migrates), and the Client waits on its own.
	waiterLooks.wait(t, ctx, "the waiting Acquire's first look answered", func(_, answered int) bool { return answered >= 1 })
	holderLooks.wait(t, ctx, "the release's call answered", func(_, answered int) bool { return answered >= 1 })
	m.finish(ctx)

	if err := <-released; err != nil {
		t.Fatalf("release during the migration: %v", err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("Acquire waiting through the migration: %v", r.err)
		}
		if r.lk.Token() <= lk.Token() {
			t.Errorf("token after the migration %d, not above %d", r.lk.Token(), lk.Token())
		}
		if err := r.lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the lock after the migration")
	}

	// The lock lives on its new node now.
	again, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the migration: %v", err)
	}
	defer again.Release(ctx)
	if n, err := m.target.Exists(ctx, fmt.Sprintf("%s:{%s}:lock", dlock.DefaultPrefix, key)).Result(); err != nil || n != 1 {
		t.Errorf("lock hash on the target node: %d, %v", n, err)
	}
}

// A re-entrant Acquire (the context carries the lock) waits a migration of the lock's slot
// out, as a first one does; a re-entrant TryAcquire does not wait: ErrUnavailable.
func TestReentryThroughSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testContext(t, 60*time.Second)
	rdb := cl.Client(t)
	looks := newLookCounter() // the re-entrant Acquire's calls (marked by markLooks)
	rdb.AddHook(looks)
	holder := newClient(t, rdb)
	key := uniqueKey(t)
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	m := startSlotMigration(t, ctx, cl, key)
	held := dlock.WithLock(ctx, lk)
	if _, err := holder.TryAcquire(held, key); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("re-entrant TryAcquire during the migration: %v, want ErrUnavailable", err)
	}
	actx, cancel := context.WithTimeout(markLooks(held), 10*time.Second)
	defer cancel()
	reentered := acquireOutcome(holder, actx, key)
	// The migration ends only once go-redis's own retries of the re-entry's call are over: it
	// has an answer (TRYAGAIN: the slot still migrates), and the Client waits on its own.
	looks.wait(t, ctx, "the re-entry's call answered", func(_, answered int) bool { return answered >= 1 })
	m.finish(ctx)
	r := <-reentered
	inner, err := r.lk, r.err
	if err != nil {
		t.Fatalf("re-entrant Acquire during the migration: %v", err)
	}
	if n := inner.HoldCount(); n != 2 {
		t.Errorf("holds after the re-entry: %d, want 2", n)
	}
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Both holds are gone in Redis: the key is free on its new node.
	again, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after both releases: %v", err)
	}
	_ = again.Release(ctx)
}

// With WithReplicaAck the scripts go to the slot's master on that node's own connection,
// with WAIT after them. Once a slot has moved to another master, that node answers MOVED:
// the Client follows it, as go-redis does for other commands, rather than failing until the
// cluster client happens to reload its layout.
func TestReplicaAckFollowsMovedSlot(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithReplicas(1))
	ctx := testContext(t, 60*time.Second)
	c := newClient(t, cl.Client(t), dlock.WithReplicaAck(1, 2*time.Second))
	key := uniqueKey(t)
	lk, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	m := startSlotMigration(t, ctx, cl, redisName(key, "lock"))
	m.finish(ctx)
	waitReplicated(t, ctx, m.target)

	lk, err = c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the slot moved (the migration is over): %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release after the slot moved: %v", err)
	}
}

// waitReplicated waits until master has a replica online.
func waitReplicated(t *testing.T, ctx context.Context, master *redis.Client) {
	t.Helper()
	for !strings.Contains(master.Info(ctx, "replication").Val(), "connected_slaves:1") {
		select {
		case <-ctx.Done():
			t.Fatal("the slot's new master has no replica")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A Cluster node that gives a slot away to another master ends its sharded subscriptions
// of the slot's channels, and answers MOVED to a new SSUBSCRIBE on a connection that was
// bound to it before. Waiters must still be woken by the hand-off message, not find the lock
// at their next look a retry interval later: a subscription Redis ended is dropped with its
// connection at once, one never confirmed after a retry interval too, and the waiters listen
// anew on a connection to the slot's master of now.
func TestHandOffAfterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	ctx := testContext(t, 90*time.Second)
	holder := newClient(t, rdb)
	waiter := newClient(t, rdb, dlock.WithRetryInterval(5*time.Second))
	var key string
	handOff := func(what string, within time.Duration) {
		t.Helper()
		took, err := handOffTime(t, ctx, rdb, holder, waiter, key)
		t.Logf("%s: the waiter got the lock %v after the release", what, took)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if took > within {
			t.Errorf("%s: the waiter got the lock %v after the release, want it woken by the message (its next look comes 5 s after the last)", what, took)
		}
	}

	// The slot moves while the channel is still subscribed (its linger after the last wait):
	// the node that gives the slot away ends the subscription, and the waiter's subscriber
	// drops the connection. A machine that stalls past the linger (1 s) ends the subscription
	// first, which is the idle case below: that attempt is run again, on a new key.
	const attempts = 5
	var lockKey string
	var first *redistest.Server
	for attempt := 1; ; attempt++ {
		key = uniqueKey(t)
		handOff("before the migration", 2*time.Second)
		lockKey = redisName(key, "lock")
		var err error
		if first, err = cl.MasterOf(ctx, lockKey); err != nil {
			t.Fatal(err)
		}
		fate := dlock.SubscriptionEnded // the linger ended before the migration began
		if watch, ok := dlock.WatchSubscription(waiter, key); ok {
			m := startSlotMigration(t, ctx, cl, lockKey)
			m.finish(ctx)
			fate = subscriptionFate(t, ctx, watch)
		}
		if fate == dlock.SubscriptionLost {
			break
		}
		if attempt == attempts {
			t.Fatalf("in %d attempts, the channel's linger always ended before the slot moved: the "+
				"migration of a slot whose channel is still subscribed was never tested", attempts)
		}
		t.Logf("attempt %d: the channel's linger ended before the slot moved: not the case, again", attempt)
	}
	handOff("after the slot moved, the subscription lingering", 2*time.Second)

	// The slot moves while the connection is idle: no channel subscribed, so no sign of the
	// move reaches it, and the next SSUBSCRIBE on it goes unconfirmed (MOVED).
	waitShardChannel(t, ctx, rdb, key, false) // past the linger: unsubscribed on every node
	// On to the third master: the connection of the waits before is bound to neither.
	m := startSlotMigration(t, ctx, cl, lockKey, first.Addr())
	m.finish(ctx)
	handOff("after the slot moved again, the connection idle", 2*time.Second)
	handOff("the wait after that", 2*time.Second)
}

// subscriptionFate waits until the subscription watch follows (see dlock.WatchSubscription)
// is no longer held, and returns what became of it. It fails the test when ctx ends first.
func subscriptionFate(t *testing.T, ctx context.Context, watch func() dlock.SubscriptionFate) dlock.SubscriptionFate {
	t.Helper()
	for {
		if fate := watch(); fate != dlock.SubscriptionHeld {
			return fate
		}
		select {
		case <-ctx.Done():
			t.Fatal("the subscription was neither ended by Redis nor after its linger")
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// handOffTime: the holder takes key, the waiter waits for it, the holder releases it once the
// waiter is in line and its subscription is in Redis (on the node that serves the slot: one
// made on a node that gave the slot away gets MOVED, and the waiter listens anew); it returns
// how long after the release the waiter had the lock. rdb is a client of the cluster.
func handOffTime(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, holder, waiter *dlock.Client, key string) (time.Duration, error) {
	t.Helper()
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lk  *dlock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := waiter.Acquire(wctx, key)
		got <- result{l, err, time.Now()}
	}()
	waitQueued(t, rdb, ctx, key)
	waitShardChannel(t, ctx, rdb, key, true)
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err == nil {
		_ = r.lk.Release(ctx)
	}
	return r.at.Sub(released), r.err
}

// waitShardChannel waits until key's (sharded) channel is subscribed on a master of the
// cluster rdb is a client of (subscribed), or on none (!subscribed). It fails the test when
// ctx ends first.
func waitShardChannel(t *testing.T, ctx context.Context, rdb *redis.ClusterClient, key string, subscribed bool) {
	t.Helper()
	ch := channelOf(key)
	for {
		var n atomic.Int64
		err := rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			m, err := node.PubSubShardNumSub(ctx, ch).Result()
			n.Add(m[ch])
			return err
		})
		if err == nil && (n.Load() > 0) == subscribed {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("shard channel %s: %d subscribers on the masters (%v), want subscribed %v", ch, n.Load(), err, subscribed)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// A slot left mid-migration, with one of its two locks moved (as an interrupted reshard
// leaves it), gets TRYAGAIN for a renew script that names both. That refusal costs nothing
// to the locks of the node's other slots, renewed in the same pipeline, and the two locks of
// the slot are renewed one key per call, where each key is now.
func TestMigratingSlotCostsNoRenewals(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := testContext(t, 60*time.Second)
	rdb := cl.Client(t)
	lockKey := func(k string) string { return redisName(k, "lock") }
	base := uniqueKey(t)
	k1 := base + "-0"
	slot, err := rdb.ClusterKeySlot(ctx, lockKey(k1)).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, err := cl.MasterOf(ctx, lockKey(k1))
	if err != nil {
		t.Fatal(err)
	}
	// Pipelines of CLUSTER KEYSLOT find a second key in k1's slot (about one in 16384), and
	// keys of other slots on the same master.
	node := src.Client(t)
	k2 := ""
	var others []string
	for chunk := 0; (k2 == "" || len(others) < 20) && chunk < 40; chunk++ {
		var cands []*redis.IntCmd
		if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range 10000 {
				cands = append(cands, p.ClusterKeySlot(ctx, lockKey(fmt.Sprintf("%s-%d", base, chunk*10000+i+1))))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for i, cmd := range cands {
			k := fmt.Sprintf("%s-%d", base, chunk*10000+i+1)
			switch s := cmd.Val(); {
			case s == slot && k2 == "":
				k2 = k
			case s != slot && len(others) < 20:
				if m, _ := cl.MasterOf(ctx, lockKey(k)); m == src {
					others = append(others, k)
				}
			}
		}
	}
	if k2 == "" || len(others) < 20 {
		t.Fatalf("no second key in slot %d (%q) or too few others (%d)", slot, k2, len(others))
	}
	c := newClient(t, rdb, dlock.WithLease(900*time.Millisecond))
	var locks []*dlock.Lock
	for _, k := range append(others, k1, k2) {
		lk, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, lk)
	}
	mig := startSlotMigration(t, ctx, cl, lockKey(k1))
	host, port, _ := strings.Cut(mig.targetAddr, ":")
	mig.do(ctx, mig.source, "MIGRATE", host, port, "", 0, 5000, "KEYS", lockKey(k1))
	if err := rdb.Do(ctx, "EVAL", "return redis.call('EXISTS', KEYS[1], KEYS[2])", 2, lockKey(k1), lockKey(k2)).Err(); !redis.IsTryAgainError(err) {
		mig.finish(ctx)
		t.Fatalf("a script naming both keys of the migrating slot: %v, want TRYAGAIN", err)
	}
	// A deliberate window, over three leases: a lock whose renewals fail is lost within one.
	time.Sleep(3 * time.Second)
	lost := 0
	for i, lk := range locks {
		if err := lk.Err(); err != nil {
			lost++
			t.Errorf("lock %d (%s) lost while slot %d migrated: %v", i, lk.Key(), slot, err)
		}
	}
	mig.finish(ctx)
	for _, lk := range locks {
		_ = lk.Release(ctx)
	}
	if lost > 0 {
		t.Fatalf("%d of %d locks lost; want none: the node answered all along", lost, len(locks))
	}
}
