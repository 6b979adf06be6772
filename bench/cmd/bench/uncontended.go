package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// floorName is the bare SET NX PX + DEL pair that uncontended latency is compared with.
const floorName = "SET NX + DEL (floor)"

// scriptFloorName is a reference, not a contender: two EVALSHA calls of a script that does
// nothing, the cost of the script mechanism itself for any lock that acquires and releases
// with a script.
const scriptFloorName = "2 x EVALSHA of `return 1` (reference)"

// fencedMinName is a reference, not a contender: the least a lock that keeps a fencing token
// across holders can do with one script per step. Its acquire script reads the key and, when
// free, writes the holder and the next token with the lease; its release script reads the key
// and, when the caller holds it, writes it free, keeping the token. One read and one write
// each, no wait line, no re-entry, no retry tombstone.
const fencedMinName = "2 scripts, one read + one write each (reference)"

// pingName is a reference, not a contender: one PING per operation on a client like the
// others, measured in the same rotation. Its p50 is the run's Redis round trip: every "PING
// round trips" figure and the contended floor use it, because a PING sent amid the lock
// operations sees the same CPU and scheduling state they do (PINGs sent back to back by an
// otherwise idle process read differently).
const pingName = "PING (reference)"

// isReference reports whether name is a reference row of the uncontended table rather than a
// contender.
func isReference(name string) bool {
	return name == floorName || name == scriptFloorName || name == fencedMinName || name == pingName
}

// emptyScript is the script of the script floor.
var emptyScript = redis.NewScript("return 1")

// fencedMinAcquire and fencedMinRelease are the scripts of the fenced minimum. The key holds
// "<owner> <token>", owner empty when free. ARGV: owner, lease ms (acquire); owner (release).
var (
	fencedMinAcquire = redis.NewScript(`
local v = redis.call('GET', KEYS[1]) or ' 0'
local owner, token = string.match(v, '^(%S*) (%d+)$')
if owner ~= '' then
  return -1
end
token = tonumber(token) + 1
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'PX', ARGV[2])
return token`)
	fencedMinRelease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
local owner, token = string.match(v, '^(%S*) (%d+)$')
if owner ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ' ' .. token, 'KEEPTTL')
return 1`)
)

// fencedMinOp is one Acquire+Release of the fenced minimum on key, as owner.
func fencedMinOp(c redis.Scripter, key, owner string) op {
	keys := []string{key}
	return func(ctx context.Context) error {
		got, err := fencedMinAcquire.Run(ctx, c, keys, owner, 10000).Int64()
		if err != nil {
			return err
		}
		if got < 0 {
			return fmt.Errorf("fenced minimum: %s is held", key)
		}
		freed, err := fencedMinRelease.Run(ctx, c, keys, owner).Int64()
		if err != nil {
			return err
		}
		if freed != 1 {
			return fmt.Errorf("fenced minimum: %s was not held at release", key)
		}
		return nil
	}
}

// uncontendedResult is one contender (or the floor) in the uncontended scenario.
type uncontendedResult struct {
	name       string
	lat        metrics.Sample  // every measured op
	client     metrics.Sample  // every measured op's time outside its Redis calls
	rounds     []time.Duration // p50 of each round, in round order
	ops        int64
	counts     metrics.Counts // hook counts over all measured ops
	topLevel   int64          // commandstats calls of the contender's top-level commands
	serverUsec int64          // server time of those commands (scripts include their inner calls)
	otherCalls int64          // commandstats calls of everything else (script inner calls)
	// Whole-process CPU time over the measured ops: Redis's (INFO cpu) and this process's.
	serverCPU, processCPU time.Duration
}

// cpuPerOp is d per measured op, in µs.
func (r *uncontendedResult) cpuPerOp(d time.Duration) float64 {
	return float64(d) / float64(time.Microsecond) / float64(r.ops)
}

func (r *uncontendedResult) perOp(n int64) float64 { return float64(n) / float64(r.ops) }

// roundRatios returns, for each round, r's p50 over ref's p50 in the same round.
func (r *uncontendedResult) roundRatios(ref *uncontendedResult) []float64 {
	var out []float64
	for i := range min(len(r.rounds), len(ref.rounds)) {
		if ref.rounds[i] > 0 {
			out = append(out, float64(r.rounds[i])/float64(ref.rounds[i]))
		}
	}
	return out
}

// ratioSpread is the median and range of r's per-round p50 ratios to ref.
func (r *uncontendedResult) ratioSpread(ref *uncontendedResult) spread {
	return spreadOf(r.roundRatios(ref))
}

// op is one measured Acquire+Release.
type op func(ctx context.Context) error

// uncontended measures Acquire+Release on a free key, one goroutine, in rounds that rotate the
// order of contenders; the floor is a bare SET NX PX + DEL on the same kind of client, and a
// single PING per op in the same rotation gives the run's round trip.
func (b *bench) uncontended(ctx context.Context, rep *report) error {
	names := append([]string{floorName, scriptFloorName, fencedMinName, pingName}, contenders.Names...)
	ops := map[string]op{}
	top := map[string][]string{floorName: {"set", "del"}, scriptFloorName: {"eval", "evalsha"}, fencedMinName: {"eval", "evalsha"}, pingName: {"ping"}}
	rts := map[string]*metrics.RoundTrips{}
	res := map[string]*uncontendedResult{}
	for _, name := range names {
		res[name] = &uncontendedResult{name: name}
		key := "bench:unc:" + name
		if name == floorName {
			c := b.newClient()
			defer func() { _ = c.Close() }()
			rts[name] = c.rt
			ops[name] = func(ctx context.Context) error {
				if err := c.SetNX(ctx, key, "v", 10*time.Second).Err(); err != nil {
					return err
				}
				return c.Del(ctx, key).Err()
			}
			continue
		}
		if name == scriptFloorName {
			c := b.newClient()
			defer func() { _ = c.Close() }()
			rts[name] = c.rt
			ops[name] = func(ctx context.Context) error {
				if err := emptyScript.Run(ctx, c, []string{key}, "v").Err(); err != nil {
					return err
				}
				return emptyScript.Run(ctx, c, []string{key}, "v").Err()
			}
			continue
		}
		if name == fencedMinName {
			c := b.newClient()
			defer func() { _ = c.Close() }()
			rts[name] = c.rt
			ops[name] = fencedMinOp(c, key, "bench-owner")
			continue
		}
		if name == pingName {
			c := b.newClient()
			defer func() { _ = c.Close() }()
			rts[name] = c.rt
			ops[name] = func(ctx context.Context) error { return c.Ping(ctx).Err() }
			continue
		}
		ct := b.contender(name, contenders.Config{})
		defer ct.stop()
		rts[name] = ct.c.rt
		top[name] = ct.TopLevel()
		ops[name] = func(ctx context.Context) error {
			lk, err := ct.Acquire(ctx, key)
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}
	}
	// Warm up: connections dialled, scripts loaded.
	for _, name := range names {
		for range 200 {
			if err := ops[name](ctx); err != nil {
				return fmt.Errorf("%s warm-up: %w", name, err)
			}
		}
	}
	for round := range b.plan.uncRounds {
		for _, name := range rotate(names, round) {
			r := res[name]
			cs0 := b.commandStats(ctx)
			c0 := rts[name].Snapshot()
			var lat metrics.Sample
			srv0, srvErr := metrics.ReadServerCPU(ctx, b.admin)
			proc0 := metrics.ProcessCPU()
			for range b.plan.uncOps {
				in0 := rts[name].Snapshot().Inside
				t := time.Now()
				if err := ops[name](ctx); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				d := time.Since(t)
				lat.Add(d)
				r.client.Add(max(d-(rts[name].Snapshot().Inside-in0), 0))
			}
			r.processCPU += metrics.ProcessCPU() - proc0
			srv1, err := metrics.ReadServerCPU(ctx, b.admin)
			if err = errors.Join(srvErr, err); err != nil {
				return err
			}
			r.serverCPU += srv1 - srv0
			r.rounds = append(r.rounds, lat.Quantile(0.5))
			r.lat.Merge(&lat)
			r.counts = r.counts.Add(rts[name].Snapshot().Sub(c0))
			d := b.commandStats(ctx).Sub(cs0)
			r.topLevel += d.Sum(top[name]...)
			r.serverUsec += d.SumUsec(top[name]...)
			for cmd, st := range d {
				if cmd != "info" && !slices.Contains(top[name], cmd) {
					r.otherCalls += st.Calls
				}
			}
			r.ops += int64(b.plan.uncOps)
		}
	}
	floor := res[floorName]
	for _, name := range names {
		r := res[name]
		sp := r.ratioSpread(floor)
		log.Printf("  %-22s p50 %v p99 %v rt/op %.2f client p50 %v cpu/op redis %.1fµs here %.1fµs; per-round p50/floor median %.2fx (%.2f-%.2fx)", name, r.lat.Quantile(0.5), r.lat.Quantile(0.99),
			r.perOp(r.counts.RoundTrips), r.client.Quantile(0.5), r.cpuPerOp(r.serverCPU), r.cpuPerOp(r.processCPU), sp.med, sp.lo, sp.hi)
		rep.uncontended = append(rep.uncontended, r)
	}
	return nil
}
