package dlock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// renewChunk bounds the keys of one renew script call, so one call never blocks Redis for long
// (about a millisecond for 1000 keys).
const renewChunk = 1000

// renew sends one script call per chunk of keys (per hash slot on a Cluster), pipelined: one
// round trip per node for any number of locks. On a Cluster each node gets a pipeline of its
// own, sent in parallel, so a node that does not answer fails only the renewals of its own
// locks (a *partialRenewError); the locks of the other nodes are renewed. When ctx ends while
// calls are still on their way, the error is a *lateRenewError with a part for each of those
// calls (one per node), whose wait gives its answers as they come.
func (b *redisBackend) renew(ctx context.Context, rs []renewal) ([]bool, error) {
	groups := b.renewGroups(ctx, rs)
	ok := make([]bool, len(rs))
	failed := make([]bool, len(rs))
	errs := make([]error, len(groups))
	lates := make([]*lateGroup, len(groups))
	if len(groups) == 1 {
		lates[0], errs[0] = b.renewGroup(ctx, groups[0], ok, failed)
	} else {
		var wg sync.WaitGroup
		for i, g := range groups {
			wg.Go(func() { lates[i], errs[i] = b.renewGroup(ctx, g, ok, failed) })
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
	if first == nil {
		return ok, nil
	}
	var err error = &partialRenewError{failed: failed, err: unavailable("renew", first)}
	if !slices.Contains(failed, false) {
		err = unavailable("renew", first)
	}
	var parts []lateRenewal
	for _, g := range lates {
		if g == nil {
			continue
		}
		parts = append(parts, lateRenewal{idx: g.idx, wait: func() (ok2, failed2 []bool) {
			ok2, failed2 = slices.Clone(ok), slices.Clone(failed)
			if awaitFinished(g.finished) {
				_ = g.settle(ok2, failed2) // what is still unanswered stays failed
			}
			return ok2, failed2
		}})
	}
	if len(parts) == 0 {
		return ok, err
	}
	return ok, &lateRenewError{err: err, parts: parts}
}

// renewParts splits rs by the node that serves them (see renewGroups): one part on a single
// server. Each part is one renew call, and so one pipeline, to one node.
func (b *redisBackend) renewParts(ctx context.Context, rs []renewal) [][]int {
	if !b.cluster || len(rs) < 2 {
		all := make([]int, len(rs))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	groups := b.renewGroups(ctx, rs)
	parts := make([][]int, len(groups))
	for i, g := range groups {
		for _, bt := range g {
			parts[i] = append(parts[i], bt.idx...)
		}
	}
	return parts
}

// lateGroup is a pipeline given up by its context while still on its way, with the renewals
// idx it carries: once finished is closed, settle sets the answers it got.
type lateGroup struct {
	idx      []int
	finished <-chan struct{}
	settle   func(ok, failed []bool) error
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
// the ASK redirection of a key already moved). A pipeline given up by its context while on
// its way fails every renewal of the group, and is returned as a lateGroup: it may still be
// answered.
func (b *redisBackend) renewGroup(ctx context.Context, batches []*renewBatch, ok, failed []bool) (*lateGroup, error) {
	type answer struct {
		vals []int64
		err  error
	}
	var sent []*renewBatch // what was answered last for each renewal: batches, or one-key calls
	var answers []answer
	err := b.call(ctx, func(ctx context.Context) error {
		send := func(bts []*renewBatch) []answer {
			cmds, _ := b.pipeline(ctx, len(bts), func(p redis.Pipeliner, i int, useEval bool) *redis.Cmd {
				return scriptRenew.queue(ctx, p, useEval, bts[i].keys, bts[i].args...)
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
	// settle reads what the call left: only once it is over.
	settle := func(ok, failed []bool) error {
		if answers == nil {
			return nil // nothing was sent: every renewal stays failed
		}
		var first error
		for i, bt := range sent {
			a := answers[i]
			for j, idx := range bt.idx {
				if a.err == nil && j < len(a.vals) {
					ok[idx], failed[idx] = a.vals[j] == 1, false
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
	var abandoned *inFlightError
	if errors.As(err, &abandoned) || answers == nil {
		// The call was given up (it may still be running: answers is not read until it is
		// over) or nothing was sent: every renewal's outcome is unknown for now.
		for _, bt := range batches {
			for _, i := range bt.idx {
				failed[i] = true
			}
		}
		if abandoned != nil {
			g := &lateGroup{finished: abandoned.finished, settle: settle}
			for _, bt := range batches {
				g.idx = append(g.idx, bt.idx...)
			}
			return g, err
		}
		return nil, err
	}
	return nil, settle(ok, failed)
}
