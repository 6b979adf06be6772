package main

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// manyKeysResult is one contender with 64 goroutines over 10,000 keys, over all its rounds.
type manyKeysResult struct {
	name   string
	ops    int64
	dur    time.Duration
	rates  []float64      // operations/s of each round
	lat    metrics.Sample // Acquire+Release, all rounds
	errs   int64
	counts metrics.Counts
	// serverUsec is the commandstats usec of the contender's top-level commands.
	serverUsec int64
	poolConns  []int // connections in the client's pool after each round's warm-up
}

// rate is the median of the rounds' operations/s.
func (r *manyKeysResult) rate() float64 { return spreadOf(r.rates).med }

func (r *manyKeysResult) rateSpread() spread { return spreadOf(r.rates) }

// manyKeys: workers each Acquire+Release a uniformly random key out of manyKeys, for a fixed
// time. Collisions are rare (64 of 10,000 keys held at once), so this measures the cost of the
// uncontended path under parallel load. Each contender runs manyKeysRounds times, on a fresh
// client each time, in an order that rotates from round to round; the time is split over the
// rounds.
func (b *bench) manyKeys(ctx context.Context, rep *report) error {
	res := map[string]*manyKeysResult{}
	for _, name := range contenders.Names {
		res[name] = &manyKeysResult{name: name}
	}
	dur := b.plan.manyKeysDur / time.Duration(b.plan.manyKeysRounds)
	for round := range b.plan.manyKeysRounds {
		for _, name := range rotate(contenders.Names, round+1) {
			if err := b.manyKeysRun(ctx, res[name], round, dur); err != nil {
				return err
			}
			r := res[name]
			log.Printf("  round %d %-14s %7.0f ops/s pool %d", round+1, name, r.rates[len(r.rates)-1], r.poolConns[len(r.poolConns)-1])
		}
	}
	for _, name := range contenders.Names {
		r := res[name]
		log.Printf("  %-14s median %s ops/s p99 %v", name, r.rateSpread().count(0), r.lat.Quantile(0.99))
		rep.manyKeys = append(rep.manyKeys, r)
	}
	return nil
}

// manyKeysRun runs one round of one contender and adds it to r.
func (b *bench) manyKeysRun(parent context.Context, r *manyKeysResult, round int, dur time.Duration) error {
	name := r.name
	ct := b.contender(name, contenders.Config{})
	defer ct.stop()
	prefix := fmt.Sprintf("bench:many:%s:%d:", name, round)
	conns, err := warmUp(parent, ct, b.plan.manyWorkers, prefix+"warm")
	if err != nil {
		return err
	}
	var ops, errs atomic.Int64
	var lat metrics.Sample
	var wg sync.WaitGroup
	cs0 := b.commandStats(parent)
	c0 := ct.c.rt.Snapshot()
	ctx, cancel := context.WithTimeout(parent, dur)
	defer cancel()
	for range b.plan.manyWorkers {
		wg.Go(func() {
			var ds []time.Duration
			for ctx.Err() == nil {
				key := fmt.Sprintf("%s%d", prefix, rand.IntN(b.plan.manyKeys))
				t := time.Now()
				lk, err := ct.Acquire(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				err = lk.Release(rctx)
				rcancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				ds = append(ds, time.Since(t))
				ops.Add(1)
			}
			for _, d := range ds {
				lat.Add(d)
			}
		})
	}
	wg.Wait()
	counts := ct.c.rt.Snapshot().Sub(c0)
	serverUsec := b.commandStats(parent).Sub(cs0).SumUsec(ct.TopLevel()...)
	if err := parent.Err(); err != nil {
		return err
	}
	r.rates = append(r.rates, float64(ops.Load())/dur.Seconds())
	r.lat.Merge(&lat)
	r.ops += ops.Load()
	r.dur += dur
	r.errs += errs.Load()
	r.counts = r.counts.Add(counts)
	r.serverUsec += serverUsec
	r.poolConns = append(r.poolConns, conns)
	return nil
}
