package dlock

import (
	"cmp"
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/lib.lua
	luaLib string
	//go:embed scripts/acquire.lua
	luaAcquire string
	//go:embed scripts/release.lua
	luaRelease string
	//go:embed scripts/leave.lua
	luaLeave string
	//go:embed scripts/reenter.lua
	luaReenter string
	//go:embed scripts/renew.lua
	luaRenew string

	scriptAcquire = newLuaScript(luaLib + luaAcquire)
	scriptRelease = newLuaScript(luaLib + luaRelease)
	scriptLeave   = newLuaScript(luaLib + luaLeave)
	scriptReenter = newLuaScript(luaReenter)
	scriptRenew   = newLuaScript(luaRenew)
	// scriptProbe does nothing, as a script that may write: it reaches the master of its
	// key's slot, and Redis holds it back while it holds back writes (CLIENT PAUSE WRITE, a
	// failover), exactly as it would the look whose silence it checks.
	scriptProbe = newLuaScript("return 1")
)

// luaScript is a script of the Redis backend, sent by its SHA1 (EVALSHA), and in full (EVAL)
// only when the server does not have it yet: after a restart, a failover, SCRIPT FLUSH.
type luaScript struct {
	src, sha string
	shaArg   any // sha as a command argument, converted once
}

func newLuaScript(src string) *luaScript {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &luaScript{src: src, sha: sha, shaArg: sha}
}

// run runs s on keys with args, as redis.Script.Run does.
func (s *luaScript) run(ctx context.Context, rdb redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	keyArgs := make([]any, len(keys))
	for i, key := range keys {
		keyArgs[i] = key
	}
	return s.runKeyArgs(ctx, rdb, keyArgs, args...)
}

// runKeyArgs is run with the keys already converted to command arguments (see lockNames),
// building the command in one argument slice: Script.Run converts the keys and copies keys
// and args into a slice of its own on every call.
func (s *luaScript) runKeyArgs(ctx context.Context, rdb redis.UniversalClient, keyArgs []any, args ...any) *redis.Cmd {
	cmdArgs := make([]any, 0, 3+len(keyArgs)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.shaArg, len(keyArgs))
	cmdArgs = append(cmdArgs, keyArgs...)
	cmdArgs = append(cmdArgs, args...)
	cmd := s.process(ctx, rdb, cmdArgs, len(keyArgs) > 0)
	if isNoScript(cmd.Err()) {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = s.process(ctx, rdb, cmdArgs, len(keyArgs) > 0)
	}
	return cmd
}

func (s *luaScript) process(ctx context.Context, rdb redis.UniversalClient, cmdArgs []any, keyed bool) *redis.Cmd {
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if keyed {
		cmd.SetFirstKeyPos(3) // a Cluster client routes the command by its first key
	}
	_ = rdb.Process(ctx, cmd)
	return cmd
}

// renewChunk bounds the keys of one renew script call, so one call never blocks Redis for long
// (about a millisecond for 1000 keys).
const renewChunk = 1000

// redisBackend keeps locks in Redis. Layout for lock key K under prefix P, with T the escaped K:
//
//	P:{T}:lock   hash    owner, fencing token, hold count and re-entry holds, last released
//	                     owner; kept without owner after a release until its lease would end
//	P:{T}:q      zset    waiters in arrival order
//	P:{T}:qd     zset    waiters' liveness deadlines
//	P:{T}:done   string  completion record
//	P:{T}:ch     channel hand-off notices (sharded pub/sub on a Cluster)
type redisBackend struct {
	rdb     redis.UniversalClient
	cluster bool
	oneNode bool // a *redis.Client: one server (or one master, behind Sentinel)
	prefix  string
	claim   time.Duration // lease of a handed-off lock until its new holder confirms it
	live    time.Duration // a queued waiter not heard of for this long leaves the line
	// replicas > 0: writes that grant a lock are followed by WAIT replicas replicaWait.
	replicas    int
	replicaWait time.Duration
	// Script arguments that are the same on every call, converted to interface values once
	// (converting an int64 or a string allocates): the claim and liveness leases in ms, the
	// publish command, and the Client's default lease in ms.
	claimArg, liveArg, pubArg, leaseArg any
	lease                               time.Duration
	// mineArg is the owner-id prefix of the Client's owners (see ownerIDs): a release that
	// hands the lock to one of them publishes nothing, and the waiter is told here.
	mineArg any

	ctxTimeouts bool          // the client ends calls at their context's deadline itself
	readTimeout time.Duration // the client's socket read timeout; <= 0: none
	subs        *subscriber

	mu      sync.Mutex
	closing bool
	calls   sync.WaitGroup // calls abandoned by their context, still finishing
	// answered is when a call last got an answer (unix ns), whatever the answer said.
	answered atomic.Int64
}

func newRedisBackend(rdb redis.UniversalClient, cfg *config) *redisBackend {
	_, cluster := rdb.(*redis.ClusterClient)
	_, oneNode := rdb.(*redis.Client)
	b := &redisBackend{
		rdb:     rdb,
		cluster: cluster,
		oneNode: oneNode,
		prefix:  cfg.prefix,
		claim:   3 * cfg.retry,
		live:    3 * cfg.retry,

		replicas:    cfg.replicas,
		replicaWait: cfg.replicaWait,
	}
	b.claimArg, b.liveArg, b.pubArg = ms(b.claim), ms(b.live), b.pubCmd()
	b.lease, b.leaseArg = cfg.lease, ms(cfg.lease)
	b.mineArg = cfg.ownerPrefix
	switch c := rdb.(type) {
	case *redis.Client:
		b.ctxTimeouts, b.readTimeout = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	case *redis.ClusterClient:
		b.ctxTimeouts, b.readTimeout = c.Options().ContextTimeoutEnabled, c.Options().ReadTimeout
	}
	b.subs = newSubscriber(rdb, cluster)
	return b
}

// keySuffixes are the suffixes of a lock's keys in script order (lock, queue, queue
// deadlines, record), then its channel.
var keySuffixes = [...]string{"lock", "q", "qd", "done", "ch"}

// keys returns the four keys of a lock in script order and its channel. They are substrings
// of one string: two allocations per lock, not six.
func (b *redisBackend) keys(key string) ([]string, string) {
	tag := escapeTag(key)
	var sb strings.Builder
	sb.Grow(len(keySuffixes) * (len(b.prefix) + len(tag) + 4 + 4))
	var ends [len(keySuffixes)]int
	for i, suffix := range keySuffixes {
		b.writeName(&sb, tag, suffix)
		ends[i] = sb.Len()
	}
	all := sb.String()
	keys := make([]string, len(keySuffixes)-1)
	start := 0
	for i := range keys {
		keys[i], start = all[start:ends[i]], ends[i]
	}
	return keys, all[start:]
}

// writeName writes the name of a lock's key or channel: prefix, hash tag (the escaped lock
// key), suffix (see keySuffixes).
func (b *redisBackend) writeName(sb *strings.Builder, tag, suffix string) {
	sb.WriteString(b.prefix)
	sb.WriteString(":{")
	sb.WriteString(tag)
	sb.WriteString("}:")
	sb.WriteString(suffix)
}

// lockNames are the names of one lock's keys and channel, with the keys converted to script
// arguments: made once per acquisition and handed back by the Client with every request
// about the lease (acquireRequest.names), so neither a release nor a renewal builds them
// again. A lockNames is never changed once made.
type lockNames struct {
	keys    []string // script order, see keySuffixes
	keyArgs [len(keySuffixes) - 1]any
	ch      string
}

// names returns given when it is a lockNames (of key: the Client passes back only what
// this backend made for the same key), else makes key's.
func (b *redisBackend) names(key string, given any) *lockNames {
	if n, ok := given.(*lockNames); ok {
		return n
	}
	n := &lockNames{}
	n.keys, n.ch = b.keys(key)
	for i, k := range n.keys {
		n.keyArgs[i] = k
	}
	return n
}

func (b *redisBackend) pubCmd() string {
	if b.cluster {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// ttlArg is the script argument for a lease of ttl in ms.
func (b *redisBackend) ttlArg(ttl time.Duration) any {
	if ttl == b.lease {
		return b.leaseArg
	}
	return ms(ttl)
}

func (b *redisBackend) member(r acquireRequest) string {
	flag := 0
	if r.skipCompleted {
		flag = 1
	}
	return r.owner + ":" + strconv.FormatInt(ms(r.ttl), 10) + ":" + strconv.Itoa(flag)
}

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
	call := b.call
	if r.wait {
		call = b.callThroughMigration
	}
	err := call(ctx, func(ctx context.Context) (err error) {
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
				if useEval {
					eval = p.Eval(ctx, script.src, keys, args...)
				} else {
					eval = p.EvalSha(ctx, script.sha, keys, args...)
				}
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
			if pttl, _ := reply[2].(int64); pttl > 0 {
				res.pttl = time.Duration(pttl) * time.Millisecond
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

func (b *redisBackend) reenter(ctx context.Context, key, owner, entry string, skipCompleted bool) (int, []byte, error) {
	keys, _ := b.keys(key)
	skip := 0
	if skipCompleted {
		skip = 1
	}
	var reply any
	err := b.call(ctx, func(ctx context.Context) (err error) {
		reply, err = scriptReenter.run(ctx, b.rdb, []string{keys[0], keys[3]}, owner, entry, skip).Result()
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

// release runs the release script. A hand-off to a waiter of this Client is not published
// (see ownerIDs): the waiter is told here, at once. When the call fails, the script may have
// run all the same and handed the lock to one of them, whom no message will tell: every
// waiter of this Client on the lock is told to look again, once the call is over (a call
// given up by its context finishes in the background first), and the one it was handed to
// finds it.
// releaseArgs are the release script's arguments (see release.lua).
func (b *redisBackend) releaseArgs(r releaseRequest) []any {
	if r.storeRecord {
		return []any{r.owner, r.entry, b.claimArg, b.pubArg, b.mineArg, r.record, ms(r.retention)}
	}
	return []any{r.owner, r.entry, b.claimArg, b.pubArg, b.mineArg}
}

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
	args := []any{r.owner, b.member(r), b.claimArg, b.pubArg}
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

// renew sends one script call per chunk of keys (per hash slot on a Cluster), pipelined: one
// round trip per node for any number of locks. On a Cluster each node gets a pipeline of its
// own, sent in parallel, so a node that does not answer fails only the renewals of its own
// locks (a *partialRenewError); the locks of the other nodes are renewed.
func (b *redisBackend) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	groups := b.renewGroups(ctx, rs)
	ok := make([]bool, len(rs))
	failed := make([]bool, len(rs))
	errs := make([]error, len(groups))
	if len(groups) == 1 {
		errs[0] = b.renewGroup(ctx, groups[0], ok, failed)
	} else {
		var wg sync.WaitGroup
		for i, g := range groups {
			wg.Go(func() { errs[i] = b.renewGroup(ctx, g, ok, failed) })
		}
		wg.Wait()
	}
	var first error
	for _, err := range errs {
		if err != nil {
			first = err
			break
		}
	}
	switch {
	case first == nil:
		return ok, nil
	case !slices.Contains(failed, false):
		return nil, unavailable("renew", first)
	}
	return ok, &partialRenewError{failed: failed, err: unavailable("renew", first)}
}

// renewBatch is one renew script call: the lock keys of one slot (at most renewChunk), with
// the positions of their renewals.
type renewBatch struct {
	idx  []int
	keys []string
	args []any
}

// renewGroups splits rs into script calls, grouped by the node that serves them: one group on
// a single server; on a Cluster, one per master as the client's cluster state has it (calls
// whose node is unknown form a group of their own; go-redis routes every call anyway).
func (b *redisBackend) renewGroups(ctx context.Context, rs []renewal) [][]*renewBatch {
	var batches []*renewBatch
	bySlot := map[int]*renewBatch{}
	for i, r := range rs {
		keys := b.names(r.key, r.names).keys
		slot := 0
		if b.cluster {
			slot = hashSlot(keys[0])
		}
		bt := bySlot[slot]
		if bt == nil || len(bt.keys) >= renewChunk {
			bt = &renewBatch{}
			bySlot[slot] = bt
			batches = append(batches, bt)
		}
		bt.idx = append(bt.idx, i)
		bt.keys = append(bt.keys, keys[0])
		bt.args = append(bt.args, r.owner, ms(r.ttl))
	}
	cc, ok := b.rdb.(*redis.ClusterClient)
	if !ok {
		return [][]*renewBatch{batches}
	}
	var groups [][]*renewBatch
	byNode := map[string]int{}
	for _, bt := range batches {
		addr := ""
		if node, err := cc.MasterForKey(ctx, bt.keys[0]); err == nil {
			addr = node.Options().Addr
		}
		g, seen := byNode[addr]
		if !seen {
			g = len(groups)
			byNode[addr] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], bt)
	}
	return groups
}

// renewGroup sends batches in one pipeline and sets ok for the renewals of every call that
// was answered, and failed for those of the calls that were not (their outcome is unknown);
// it returns the first such call's error. Calls fail one by one: a script refused for its
// slot alone (TRYAGAIN while the slot migrates) costs only that slot's renewals, and those
// are sent again one key per call, which Redis runs where each key is now (go-redis follows
// the ASK redirection of a key already moved). A call given up by its context may still
// finish: it writes nothing then.
func (b *redisBackend) renewGroup(ctx context.Context, batches []*renewBatch, ok, failed []bool) error {
	type answer struct {
		vals []int64
		err  error
	}
	var sent []*renewBatch // what was answered last for each renewal: batches, or one-key calls
	var answers []answer
	err := b.call(ctx, func(ctx context.Context) error {
		send := func(bts []*renewBatch) []answer {
			cmds, _ := b.pipeline(ctx, len(bts), func(p redis.Pipeliner, i int, useEval bool) *redis.Cmd {
				if useEval {
					return p.Eval(ctx, scriptRenew.src, bts[i].keys, bts[i].args...)
				}
				return p.EvalSha(ctx, scriptRenew.sha, bts[i].keys, bts[i].args...)
			})
			got := make([]answer, len(cmds))
			for i, cmd := range cmds {
				got[i].vals, got[i].err = cmd.Int64Slice()
			}
			return got
		}
		got := send(batches)
		var bts, single []*renewBatch
		var out []answer
		for i, bt := range batches {
			if !migrating(got[i].err) || len(bt.idx) < 2 {
				bts, out = append(bts, bt), append(out, got[i])
				continue
			}
			for j := range bt.idx {
				single = append(single, &renewBatch{idx: bt.idx[j : j+1], keys: bt.keys[j : j+1], args: bt.args[2*j : 2*j+2]})
			}
		}
		if len(single) > 0 {
			bts, out = append(bts, single...), append(out, send(single)...)
		}
		sent, answers = bts, out
		for _, a := range out {
			var rerr redis.Error
			if a.err == nil || errors.As(a.err, &rerr) {
				return nil // the store answered (a refusal of one call is an answer)
			}
		}
		if len(out) == 0 {
			return errors.New("renew: no calls sent")
		}
		return out[0].err
	})
	var abandoned *inFlightError
	if errors.As(err, &abandoned) || answers == nil {
		// The call was given up (it may still be running: answers is not read) or nothing
		// was sent: every renewal's outcome is unknown.
		for _, bt := range batches {
			for _, i := range bt.idx {
				failed[i] = true
			}
		}
		return err
	}
	var first error
	for i, bt := range sent {
		a := answers[i]
		for j, idx := range bt.idx {
			if a.err == nil && j < len(a.vals) {
				ok[idx] = a.vals[j] == 1
				continue
			}
			failed[idx] = true
			if first == nil {
				first = cmp.Or(a.err, errors.New("renewal not answered"))
			}
		}
	}
	return first
}

// isNoScript reports whether the server did not know a script by its SHA (after a restart or
// failover), so it must be sent in full.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// pipeline sends n script commands in one pipeline; the ones the server does not know by SHA
// (after a restart or failover) are sent again in full.
func (b *redisBackend) pipeline(ctx context.Context, n int, cmd func(p redis.Pipeliner, i int, useEval bool) *redis.Cmd) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = cmd(p, i, false)
		}
		return nil
	})
	var again []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, err
	}
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			cmds[i] = cmd(p, i, true)
		}
		return nil
	})
	for _, c := range cmds {
		if c.Err() != nil {
			return cmds, c.Err()
		}
	}
	return cmds, err
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

// channel returns the channel of a lock and its slot (see slot), building no key name.
func (b *redisBackend) channel(key string) (string, int) {
	tag, suffix := escapeTag(key), keySuffixes[len(keySuffixes)-1]
	var sb strings.Builder
	sb.Grow(len(b.prefix) + len(tag) + 4 + len(suffix))
	b.writeName(&sb, tag, suffix)
	ch := sb.String()
	if b.cluster {
		return ch, hashSlot(ch) // the lock's hash tag: the slot of its keys
	}
	return ch, 0
}

// slot is the pub/sub connection of a lock's channel, given the lock's keys: on a Cluster
// the keys' hash slot, else 0.
func (b *redisBackend) slot(keys []string) int {
	if b.cluster {
		return hashSlot(keys[0])
	}
	return 0
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

func (b *redisBackend) close() error {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.subs.close()
	b.calls.Wait()
	return nil
}

// call runs fn and returns when it is done or ctx ends, whichever comes first, so a wait
// respects its context even when the Redis client was built without ContextTimeoutEnabled
// (then a command blocks for up to ReadTimeout). fn is called directly, without a goroutine,
// when the call cannot outlive ctx by much: go-redis ends it at ctx's deadline itself
// (ContextTimeoutEnabled), ctx cannot end, or the client's ReadTimeout ends it before ctx's
// deadline would. A context cancelled without a deadline (a request whose client went away)
// then waits for the call in flight, which ends within the client's timeouts. Otherwise fn
// runs in a goroutine; an abandoned call finishes in the background and close waits for it.
// A goroutine per call costs tens of microseconds on a small machine, where a Redis round
// trip costs about a hundred.
func (b *redisBackend) call(ctx context.Context, fn func(context.Context) error) error {
	if !b.mayOutlive(ctx) {
		return b.noteAnswer(fn(ctx))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return fn(ctx) // nothing may outlive close: run it here
	}
	b.calls.Add(1)
	b.mu.Unlock()
	var err error
	finished := make(chan struct{})
	go func() {
		defer b.calls.Done()
		defer close(finished)
		err = b.noteAnswer(fn(ctx))
	}()
	select {
	case <-finished:
		return err
	case <-ctx.Done():
		return &inFlightError{err: ctx.Err(), finished: finished}
	}
}

// migrationWait bounds how long callThroughMigration waits for a slot migration to end.
const migrationWait = 5 * time.Second

// callThroughMigration is call, run again while a slot migration refuses it (see
// migrating), for at most migrationWait and while ctx lasts. A Cluster answers TRYAGAIN to a
// script while the slot of its keys is being migrated to another node, because the script
// names keys that are absent (the line, the record); the script did not run, so running it
// again is safe. go-redis's own retries end within a fraction of a second, well before a
// migration of any size does. A release or a hand-back that gave up there would leave the
// lock held, and its line blocked, until the lease ends; a waiting acquisition is willing to
// wait anyway. TryAcquire does not wait: it fails with ErrUnavailable.
func (b *redisBackend) callThroughMigration(ctx context.Context, fn func(context.Context) error) error {
	var start time.Time // of the first refusal: the common call is not refused
	delay := 10 * time.Millisecond
	for {
		err := b.call(ctx, fn)
		if !migrating(err) {
			return err
		}
		if start.IsZero() {
			start = time.Now()
		}
		if time.Since(start)+delay > migrationWait {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// migrating reports whether err is a refusal that a slot migration gives while it lasts:
// TRYAGAIN, or a MOVED or ASK redirection left over when go-redis's own redirections ran
// out (the nodes disagree about the slot until every one has been told where it went). The
// script did not run.
func migrating(err error) bool {
	if err == nil {
		return false
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask || redis.IsTryAgainError(err)
}

// noteAnswer records when the store answered a call that returned err: with a reply, a Redis
// error reply or redis.Nil, but not a network or context error. It returns err.
func (b *redisBackend) noteAnswer(err error) error {
	if err == nil || isReply(err) {
		b.answered.Store(time.Now().UnixNano())
	}
	return err
}

// isReply reports whether err is an error reply from Redis (redis.Nil included). Its target
// lives here, so a call without an error does not move one to the heap.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// answeredSince answers for a single server only: on a Cluster (or any client of several
// nodes) an answer from one node says nothing of the node that holds a silent look's key, so
// the probe alone decides.
func (b *redisBackend) answeredSince(t time.Time) bool {
	return b.oneNode && b.answered.Load() > t.UnixNano()
}

// mayOutlive reports whether a call with ctx could go on well past ctx's end.
func (b *redisBackend) mayOutlive(ctx context.Context) bool {
	if b.ctxTimeouts || ctx.Done() == nil {
		return false
	}
	if !b.bounded() {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < b.readTimeout
}

// bounded reports whether every call ends within the client's timeouts, whatever its context.
func (b *redisBackend) bounded() bool { return b.readTimeout > 0 }

// escapeTag makes s safe inside a Redis Cluster hash tag: no brace can end or open a tag, so
// a user-chosen key cannot move its lock to another slot, and distinct keys stay distinct.
func escapeTag(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return tagEscaper.Replace(s)
}

// tagEscaper is built once: building a Replacer costs more than a Redis call's client side.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")
