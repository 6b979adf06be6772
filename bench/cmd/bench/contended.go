package main

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// contendedResult is one run of G goroutines on one key.
type contendedResult struct {
	name       string
	goroutines int
	hold       time.Duration
	dur        time.Duration
	table      bool // part of the table (else only a point of the throughput curve)

	acquisitions int
	waits        metrics.Sample // Acquire call to return, for each acquisition
	gaps         metrics.Sample // release started by one goroutine to acquired by another
	pendingMax   time.Duration  // longest wait still unfinished when the run ended
	reacquired   int            // acquisitions by the goroutine that released last
	perG         []int
	violations   int // acquisitions while another goroutine was inside the critical section
	errs         int
	counts       metrics.Counts
	serverUsec   int64 // commandstats usec of the contender's top-level commands
	poolConns    int   // connections in the client's pool after warm-up
	// late is how late a goroutine that sleeps probeSleep at a time woke up during the run:
	// the scheduling stalls of the machine and the Go runtime that every waiter also sees.
	late metrics.Sample
}

// probeSleep is the sleep of the stall probe of a contended run.
const probeSleep = time.Millisecond

// probe sleeps probeSleep at a time until ctx ends, recording how late each wake-up was.
func probe(ctx context.Context, late *metrics.Sample) {
	for ctx.Err() == nil {
		t := time.Now()
		time.Sleep(probeSleep)
		late.Add(max(time.Since(t)-probeSleep, 0))
	}
}

// nominalWait is what a wait in a FIFO line of G goroutines takes with every hold and
// hand-off at its median: the G-1 holds ahead of it, each followed by a hand-off.
func (r *contendedResult) nominalWait() time.Duration {
	return time.Duration(r.goroutines-1) * (r.hold + r.gaps.Quantile(0.5))
}

func (r *contendedResult) rate() float64 { return float64(r.acquisitions) / r.dur.Seconds() }

// maxWait is the longest wait, counting waits that had not ended when the run did.
func (r *contendedResult) maxWait() time.Duration { return max(r.waits.Max(), r.pendingMax) }

// reacquiredShare is the share of acquisitions (after the first) made by the goroutine that
// had just released.
func (r *contendedResult) reacquiredShare() float64 {
	if r.acquisitions < 2 {
		return 0
	}
	return float64(r.reacquired) / float64(r.acquisitions-1)
}

// maxFairShare is the largest per-goroutine count divided by the fair share total/G.
func (r *contendedResult) maxFairShare() float64 {
	if r.acquisitions == 0 {
		return 0
	}
	m := 0
	for _, n := range r.perG {
		m = max(m, n)
	}
	return float64(m) / (float64(r.acquisitions) / float64(r.goroutines))
}

// contended runs every (goroutines, hold) configuration for every contender, rotating the
// order of contenders from one configuration to the next.
func (b *bench) contended(ctx context.Context, rep *report) error {
	type cfg struct {
		g     int
		hold  time.Duration
		dur   time.Duration
		table bool
	}
	var cfgs []cfg
	for _, hold := range b.plan.holds {
		for _, g := range b.plan.goroutines {
			cfgs = append(cfgs, cfg{g, hold, b.plan.contendedDur, true})
		}
	}
	for _, g := range b.plan.curve {
		if !slices.Contains(b.plan.goroutines, g) {
			cfgs = append(cfgs, cfg{g, b.plan.holds[0], b.plan.curveDur, false})
		}
	}
	// Each configuration starts the rotation one contender later than the one before, so no
	// contender always runs first (after the previous configuration's last run).
	for ci, c := range cfgs {
		for _, name := range rotate(contenders.Names, ci) {
			r, err := b.contendedRun(ctx, name, c.g, c.hold, c.dur)
			if err != nil {
				return err
			}
			r.table = c.table
			log.Printf("  %-14s G=%-2d hold=%-5v %7.0f acq/s  gap p50 %-9v (n %d) max wait %-12v reacq %3.0f%% max share %.2fx pool %d probe late max %v",
				name, c.g, c.hold, r.rate(), r.gaps.Quantile(0.5), r.gaps.Len(), r.maxWait(), 100*r.reacquiredShare(), r.maxFairShare(), r.poolConns, r.late.Max())
			rep.contended = append(rep.contended, r)
		}
	}
	return nil
}

func (b *bench) contendedRun(parent context.Context, name string, g int, hold, dur time.Duration) (*contendedResult, error) {
	ct := b.contender(name, contenders.Config{})
	defer ct.stop()
	key := fmt.Sprintf("bench:cont:%s:%d:%d:%d", name, g, hold.Microseconds(), time.Now().UnixNano())
	// Warm up the pool (g connections) and scripts on other keys.
	conns, err := warmUp(parent, ct, g, key+":warm:")
	if err != nil {
		return nil, err
	}

	r := &contendedResult{name: name, goroutines: g, hold: hold, dur: dur, perG: make([]int, g), poolConns: conns}
	var (
		lastHolder  atomic.Int64
		lastRelease atomic.Int64 // unix ns
		inside      atomic.Int32
		violations  atomic.Int64
		errs        atomic.Int64
		waitingFrom = make([]atomic.Int64, g) // unix ns of an unfinished Acquire, 0 when none
		mu          sync.Mutex
		wg          sync.WaitGroup
	)
	lastHolder.Store(-1)
	cs0 := b.commandStats(parent)
	c0 := ct.c.rt.Snapshot()
	ctx, cancel := context.WithTimeout(parent, dur)
	defer cancel()
	var probed sync.WaitGroup
	probed.Go(func() { probe(ctx, &r.late) })
	for id := range g {
		wg.Go(func() {
			var waits, gaps []time.Duration
			var n, reacq int
			for ctx.Err() == nil {
				t0 := time.Now()
				waitingFrom[id].Store(t0.UnixNano())
				lk, err := ct.Acquire(ctx, key)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						waitingFrom[id].Store(0)
						errs.Add(1)
						continue
					}
					break
				}
				waitingFrom[id].Store(0)
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				if prev := lastHolder.Load(); prev == int64(id) {
					reacq++
				} else if prev >= 0 {
					gaps = append(gaps, t1.Sub(time.Unix(0, lastRelease.Load())))
				}
				waits = append(waits, t1.Sub(t0))
				n++
				spin(hold)
				lastHolder.Store(int64(id))
				lastRelease.Store(time.Now().UnixNano())
				inside.Add(-1)
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := lk.Release(rctx); err != nil {
					errs.Add(1)
				}
				rcancel()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, w := range waits {
				r.waits.Add(w)
			}
			for _, w := range gaps {
				r.gaps.Add(w)
			}
			r.acquisitions += n
			r.reacquired += reacq
			r.perG[id] = n
		})
	}
	<-ctx.Done()
	end := time.Now()
	for id := range g {
		if from := waitingFrom[id].Load(); from != 0 {
			r.pendingMax = max(r.pendingMax, end.Sub(time.Unix(0, from)))
		}
	}
	wg.Wait()
	probed.Wait()
	r.counts = ct.c.rt.Snapshot().Sub(c0)
	r.serverUsec = b.commandStats(parent).Sub(cs0).SumUsec(ct.TopLevel()...)
	r.violations = int(violations.Load())
	r.errs = int(errs.Load())
	if err := parent.Err(); err != nil {
		return nil, err
	}
	return r, nil
}
