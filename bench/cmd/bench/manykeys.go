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

// manyKeysResult is one contender with 64 goroutines over 10,000 keys.
type manyKeysResult struct {
	name   string
	ops    int64
	dur    time.Duration
	lat    metrics.Sample // Acquire+Release
	errs   int64
	counts metrics.Counts
	// serverUsec is the commandstats usec of the contender's top-level commands.
	serverUsec int64
}

func (r *manyKeysResult) rate() float64 { return float64(r.ops) / r.dur.Seconds() }

// manyKeys: workers each Acquire+Release a uniformly random key out of manyKeys, for a fixed
// time. Collisions are rare (64 of 10,000 keys held at once), so this measures the cost of the
// uncontended path under parallel load.
func (b *bench) manyKeys(ctx context.Context, rep *report) error {
	for _, name := range rotate(contenders.Names, 1) {
		r, err := b.manyKeysRun(ctx, name)
		if err != nil {
			return err
		}
		log.Printf("  %-14s %7.0f ops/s p99 %v", name, r.rate(), r.lat.Quantile(0.99))
		rep.manyKeys = append(rep.manyKeys, r)
	}
	return nil
}

func (b *bench) manyKeysRun(parent context.Context, name string) (*manyKeysResult, error) {
	ct := b.contender(name, contenders.Config{})
	defer ct.stop()
	prefix := fmt.Sprintf("bench:many:%s:", name)
	for i := range 2 * b.plan.manyWorkers { // warm up the pool
		lk, err := ct.Acquire(parent, fmt.Sprintf("%swarm%d", prefix, i))
		if err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", name, err)
		}
		_ = lk.Release(parent)
	}
	r := &manyKeysResult{name: name, dur: b.plan.manyKeysDur}
	var ops, errs atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	cs0 := b.commandStats(parent)
	c0 := ct.c.rt.Snapshot()
	ctx, cancel := context.WithTimeout(parent, b.plan.manyKeysDur)
	defer cancel()
	for range b.plan.manyWorkers {
		wg.Go(func() {
			var lat []time.Duration
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
				lat = append(lat, time.Since(t))
				ops.Add(1)
			}
			mu.Lock()
			for _, d := range lat {
				r.lat.Add(d)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	r.counts = ct.c.rt.Snapshot().Sub(c0)
	r.serverUsec = b.commandStats(parent).Sub(cs0).SumUsec(ct.TopLevel()...)
	r.ops, r.errs = ops.Load(), errs.Load()
	return r, parent.Err()
}
