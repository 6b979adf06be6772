package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotReplicated is returned when WAIT saw fewer replicas than WithReplicaAck asks for.
var errNotReplicated = errors.New("not acknowledged by enough replicas")

// runAcked runs a script and WAIT in one pipeline on the connection of the key's master, so
// WAIT covers exactly that script's writes.
//
// On a Cluster, a MOVED reply (the slot moved to another master since the client last
// loaded the cluster's layout) is followed, as go-redis follows it for other commands: the
// layout is reloaded and the pipeline sent to the slot's new master, at most twice.
func (b *redisBackend) runAcked(ctx context.Context, script *luaScript, keys []string, args []any) (any, error) {
	var (
		eval *redis.Cmd
		wait *redis.Cmd
	)
	for redirects := 0; ; redirects++ {
		node, err := b.master(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		send := func(useEval bool) {
			_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
				eval = script.queue(ctx, p, useEval, keys, args...)
				wait = p.Do(ctx, "WAIT", b.replicas, b.replicaWait.Milliseconds())
				return nil
			})
		}
		send(false)
		if isNoScript(eval.Err()) {
			send(true)
		}
		addr, moved := redis.IsMovedError(eval.Err())
		if !moved || redirects == 2 || !b.awaitSlotOwner(ctx, keys[0], addr) {
			break
		}
	}
	reply, err := eval.Result()
	if err != nil {
		return nil, err
	}
	if n, err := wait.Int64(); err != nil {
		return nil, err
	} else if n < int64(b.replicas) {
		return nil, fmt.Errorf("%w: %d of %d", errNotReplicated, n, b.replicas)
	}
	return reply, nil
}

// slotReloadWait bounds how long awaitSlotOwner waits for a Cluster client to reload its
// layout: one CLUSTER SLOTS round trip.
const slotReloadWait = 250 * time.Millisecond

// awaitSlotOwner has a Cluster client reload its layout and waits, up to slotReloadWait,
// until it names addr as the master of key's slot. It reports whether it does.
func (b *redisBackend) awaitSlotOwner(ctx context.Context, key, addr string) bool {
	cc, ok := b.rdb.(*redis.ClusterClient)
	if !ok {
		return false
	}
	cc.ReloadState(ctx) // starts a reload in the background
	deadline := time.Now().Add(slotReloadWait)
	for {
		if node, err := cc.MasterForKey(ctx, key); err == nil && node.Options().Addr == addr {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// master returns the client of the node that serves key: rdb itself, or on a Cluster the
// master of key's slot.
func (b *redisBackend) master(ctx context.Context, key string) (*redis.Client, error) {
	switch c := b.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", b.rdb)
}
