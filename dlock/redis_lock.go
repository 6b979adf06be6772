package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// acquireArgs are the acquire script's arguments (see acquire.lua).
func (b *redisBackend) acquireArgs(r acquireRequest) []any {
	wait, skip := 0, 0
	if r.wait {
		wait = 1
	}
	if r.skipCompleted {
		skip = 1
	}
	return []any{r.owner, b.ttlArg(r.ttl), wait, skip, b.liveArg, b.claimArg, b.pubArg}
}

func (b *redisBackend) acquire(ctx context.Context, r acquireRequest) (acquireResult, error) {
	n := b.names(r.key, r.names)
	var reply any
	err := b.callFor(r.wait)(ctx, func(ctx context.Context) (err error) {
		if b.replicas > 0 {
			reply, err = b.runAcked(ctx, scriptAcquire, n.keys, b.acquireArgs(r))
			return err
		}
		reply, err = scriptAcquire.runKeyArgs(ctx, b.rdb, n.keyArgs[:], b.acquireArgs(r)...).Result()
		return err
	})
	if err != nil {
		return acquireResult{names: n}, unavailable("acquire", err)
	}
	res, err := parseAcquire(reply, r.ttl)
	res.names = n
	return res, err
}

// confirm extends a lock handed to owner to ttl and waits for the replicas, when
// WithReplicaAck asks for them.
func (b *redisBackend) confirm(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	keys, _ := b.keys(key)
	var reply any
	err := b.call(ctx, func(ctx context.Context) (err error) {
		reply, err = b.runAcked(ctx, scriptRenew, keys[:1], []any{owner, ms(ttl)})
		return err
	})
	if err != nil {
		return false, unavailable("confirm", err)
	}
	if r, ok := reply.([]any); ok && len(r) == 1 {
		return r[0] == int64(1), nil
	}
	return false, unavailable("confirm", fmt.Errorf("unexpected reply %v", reply))
}

// parseAcquire reads the acquire script's reply: a bare token for a free lock taken for ttl,
// else a status array.
func parseAcquire(v any, ttl time.Duration) (acquireResult, error) {
	if token, ok := v.(int64); ok {
		return acquireResult{status: statusObtained, token: token, pttl: ttl}, nil
	}
	reply, _ := v.([]any)
	if len(reply) < 2 {
		return acquireResult{}, unavailable("acquire", fmt.Errorf("unexpected reply %v", v))
	}
	status, _ := reply[0].(int64)
	switch status {
	case 1:
		token, _ := reply[1].(int64)
		res := acquireResult{status: statusObtained, token: token, pttl: -1}
		if len(reply) > 2 {
			// A lock handed to us and found by our own look in the last millisecond of its
			// claim lease has PTTL 0 (Redis 7.0 reads PTTL on the live clock, expiry on the
			// script's): it ends now. Read as unknown (-1), it would count as a whole lease.
			if pttl, _ := reply[2].(int64); pttl >= 0 {
				res.pttl = max(time.Duration(pttl)*time.Millisecond, time.Millisecond)
			}
		}
		return res, nil
	case 2:
		rec, _ := reply[1].(string)
		return acquireResult{status: statusCompleted, record: []byte(rec)}, nil
	default:
		pttl, _ := reply[1].(int64)
		d := time.Duration(pttl) * time.Millisecond
		if pttl < 0 {
			d = -1
		}
		res := acquireResult{status: statusBusy, pttl: d}
		if len(reply) > 2 {
			res.token, _ = reply[2].(int64)
		}
		return res, nil
	}
}

func (b *redisBackend) reenter(ctx context.Context, r reentryRequest) (int, []byte, error) {
	keys, _ := b.keys(r.key)
	skip := 0
	if r.skipCompleted {
		skip = 1
	}
	var reply any
	err := b.callFor(r.wait)(ctx, func(ctx context.Context) (err error) {
		reply, err = scriptReenter.run(ctx, b.rdb, []string{keys[0], keys[3]}, r.owner, r.entry, skip).Result()
		return err
	})
	if err != nil {
		return 0, nil, unavailable("reenter", err)
	}
	switch r := reply.(type) {
	case int64:
		return int(r), nil, nil
	case []any:
		if len(r) == 2 {
			if rec, ok := r[1].(string); ok {
				return 0, []byte(rec), nil
			}
		}
	}
	return 0, nil, unavailable("reenter", fmt.Errorf("unexpected reply %v", reply))
}

// releaseArgs are the release script's arguments (see release.lua).
func (b *redisBackend) releaseArgs(r releaseRequest) []any {
	if r.storeRecord {
		return []any{r.owner, r.entry, b.claimArg, b.pubArg, b.mineArg, r.record, ms(r.retention)}
	}
	return []any{r.owner, r.entry, b.claimArg, b.pubArg, b.mineArg}
}

// release runs the release script. A hand-off to a waiter of this Client is not published
// (see ownerIDs): the waiter is told here, at once. When the call fails, the script may have
// run all the same and handed the lock to one of them, whom no message will tell: every
// waiter of this Client on the lock is told to look again, once the call is over (a call
// given up by its context finishes in the background first), and the one it was handed to
// finds it.
func (b *redisBackend) release(ctx context.Context, r releaseRequest) (releaseResult, error) {
	n := b.names(r.key, r.names)
	keys, ch := n.keys, n.ch
	var reply any
	err := b.callThroughMigration(ctx, func(ctx context.Context) (err error) {
		reply, err = scriptRelease.runKeyArgs(ctx, b.rdb, n.keyArgs[:], b.releaseArgs(r)...).Result()
		if err != nil {
			b.subs.lookAgain(ch, b.slot(keys))
		}
		return err
	})
	if err != nil {
		var fl *inFlightError
		if errors.As(err, &fl) {
			// Given up while the call goes on: its reply, which would name our waiter, is
			// not read. Tell them to look once it is over, whatever it answered.
			go func() {
				afterInFlight(err)
				b.subs.lookAgain(ch, b.slot(keys))
			}()
		}
		return releaseResult{}, unavailable("release", err)
	}
	if n, ok := reply.(int64); ok && n == 0 {
		return releaseResult{owned: true}, nil
	}
	arr, _ := reply.([]any)
	if len(arr) < 2 {
		return releaseResult{}, unavailable("release", fmt.Errorf("unexpected reply %v", reply))
	}
	status, _ := arr[0].(int64)
	left, _ := arr[1].(int64)
	res := releaseResult{left: int(left), owned: status == 1}
	if len(arr) == 5 {
		res.next = parseHandOff(arr[2:])
		res.woke = b.subs.deliver(ch, b.slot(keys), res.next.owner, res.next.notice())
	}
	return res, nil
}

// parseHandOff reads {owner, token, lease ms} from a script reply.
func parseHandOff(v []any) handOff {
	var h handOff
	h.owner, _ = v[0].(string)
	h.token, _ = v[1].(int64)
	if ms, ok := v[2].(int64); ok {
		h.lease = time.Duration(ms) * time.Millisecond
	}
	return h
}

func (b *redisBackend) leave(ctx context.Context, r acquireRequest) (handOff, error) {
	n := b.names(r.key, r.names)
	args := []any{r.owner, b.member(r), b.claimArg, b.pubArg, b.ttlArg(r.ttl)}
	var reply []any
	err := b.callThroughMigration(ctx, func(ctx context.Context) (err error) {
		reply, err = scriptLeave.runKeyArgs(ctx, b.rdb, n.keyArgs[:], args...).Slice()
		return err
	})
	if err != nil {
		return handOff{}, unavailable("leave", err)
	}
	if len(reply) == 3 {
		return parseHandOff(reply), nil
	}
	return handOff{}, nil
}

func (b *redisBackend) record(ctx context.Context, key string) ([]byte, bool, error) {
	keys, _ := b.keys(key)
	var val []byte
	err := b.call(ctx, func(ctx context.Context) (err error) {
		val, err = b.rdb.Get(ctx, keys[3]).Bytes()
		return err
	})
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, unavailable("record", err)
	}
	return val, true, nil
}

func (b *redisBackend) probe(ctx context.Context, key string) bool {
	keys, _ := b.keys(key)
	err := b.call(ctx, func(ctx context.Context) error { return scriptProbe.run(ctx, b.rdb, keys[:1]).Err() })
	return err == nil
}

func (b *redisBackend) listen(ctx context.Context, key, owner string) (listener, error) {
	ch, slot := b.channel(key)
	return b.subs.listen(ctx, ch, slot, owner)
}

func (b *redisBackend) listenReady(key, owner string) listener {
	if !b.subs.subscribed() {
		return nil // the common case: no waits in this process, no channel name to build
	}
	ch, slot := b.channel(key)
	return b.subs.listenReady(ch, slot, owner)
}

func (b *redisBackend) deliver(key string, h handOff) {
	ch, slot := b.channel(key)
	b.subs.deliver(ch, slot, h.owner, h.notice())
}
