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

// contendedRun is one timed run of G goroutines on one key, by one contender.
type contendedRun struct {
	goroutines int
	dur        time.Duration

	acquisitions int
	waits        metrics.Sample // Acquire call to return, for each acquisition
	gaps         metrics.Sample // release started by one goroutine to acquired by another
	pendingMax   time.Duration  // longest wait still unfinished when the run ended
	reacquired   int            // acquisitions by the goroutine that released last
	perG         []int
	violations   int // acquisitions while another goroutine was inside the critical section
	errs         int
	counts       metrics.Counts
	serverUsec   int64         // commandstats usec of the contender's top-level commands
	poolConns    int           // connections in the client's pool after warm-up
	warmUp       time.Duration // how long the warm-up before the run took
	// late is how late a goroutine that sleeps probeSleep at a time woke up during the run:
	// the scheduling stalls of the machine and the Go runtime that every waiter also sees.
	late metrics.Sample
}

// rate is the run's acquisitions per second.
func (r *contendedRun) rate() float64 { return float64(r.acquisitions) / r.dur.Seconds() }

// maxWait is the longest wait, counting waits that had not ended when the run did.
func (r *contendedRun) maxWait() time.Duration { return max(r.waits.Max(), r.pendingMax) }

// maxFairShare is the largest per-goroutine count divided by the fair share total/G.
func (r *contendedRun) maxFairShare() float64 {
	if r.acquisitions == 0 {
		return 0
	}
	m := 0
	for _, n := range r.perG {
		m = max(m, n)
	}
	return float64(m) / (float64(r.acquisitions) / float64(r.goroutines))
}

// contendedResult is one contender at one configuration (G goroutines, hold) over all its
// runs: several rounds for the configurations of the tables, one for the other points of the
// throughput curve. Samples, counts and times are pooled over the runs as they are added;
// per-run figures (acquisitions/s, max wait, busiest / fair) are kept by run.
type contendedResult struct {
	name       string
	goroutines int
	hold       time.Duration
	table      bool // part of the table (else only a point of the throughput curve)
	runs       []*contendedRun

	dur          time.Duration // of all runs
	acquisitions int
	waits        metrics.Sample
	gaps         metrics.Sample
	reacquired   int
	followers    int // acquisitions that had one before them in their run: those that can be re-acquisitions
	violations   int
	errs         int
	counts       metrics.Counts
	serverUsec   int64
	late         metrics.Sample
}

// add pools one run into r.
func (r *contendedResult) add(run *contendedRun) {
	r.runs = append(r.runs, run)
	r.dur += run.dur
	r.acquisitions += run.acquisitions
	r.waits.Merge(&run.waits)
	r.gaps.Merge(&run.gaps)
	r.reacquired += run.reacquired
	r.followers += max(run.acquisitions-1, 0)
	r.violations += run.violations
	r.errs += run.errs
	r.counts = r.counts.Add(run.counts)
	r.serverUsec += run.serverUsec
	r.late.Merge(&run.late)
}

// perRun returns f of each run, in run order.
func (r *contendedResult) perRun(f func(*contendedRun) float64) []float64 {
	var out []float64
	for _, run := range r.runs {
		out = append(out, f(run))
	}
	return out
}

// rateSpread is the median and range of the runs' acquisitions/s.
func (r *contendedResult) rateSpread() spread { return spreadOf(r.perRun((*contendedRun).rate)) }

// rate is the median of the runs' acquisitions/s.
func (r *contendedResult) rate() float64 { return r.rateSpread().med }

// fairSpread is the median and range of the runs' busiest / fair. Each run has goroutines of
// its own, so their counts are not added across runs.
func (r *contendedResult) fairSpread() spread {
	return spreadOf(r.perRun((*contendedRun).maxFairShare))
}

// maxWait is the longest wait of any run, counting waits that had not ended when their run did.
func (r *contendedResult) maxWait() time.Duration {
	var m time.Duration
	for _, run := range r.runs {
		m = max(m, run.maxWait())
	}
	return m
}

// reacquiredShare is the share of acquisitions (after the first of each run) made by the
// goroutine that had just released, over all runs.
func (r *contendedResult) reacquiredShare() float64 {
	if r.followers == 0 {
		return 0
	}
	return float64(r.reacquired) / float64(r.followers)
}

// poolConns lists the pool connections after each run's warm-up.
func (r *contendedResult) poolConns() []int {
	var out []int
	for _, run := range r.runs {
		out = append(out, run.poolConns)
	}
	return out
}

// rateRatios returns, for each round both have, r's acquisitions/s over ref's in the same
// round (the same configuration, run close together in time).
func rateRatios(r, ref *contendedResult) []float64 {
	var out []float64
	for i := range min(len(r.runs), len(ref.runs)) {
		if q := ref.runs[i].rate(); q > 0 {
			out = append(out, r.runs[i].rate()/q)
		}
	}
	return out
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

// contendedConfig is one configuration of the contended scenario.
type contendedConfig struct {
	g     int
	hold  time.Duration
	dur   time.Duration // of one run
	table bool          // part of the tables (run in rounds), else only a point of the curve
}

// contendedBlock is every contender's run of one configuration in one round, in order.
type contendedBlock struct {
	cfg   contendedConfig
	round int
	order []string
}

// contendedSchedule returns the runs of the contended scenario in the order they run. The
// configurations of the tables (every G of p.goroutines at every hold) run in
// p.contendedRounds rounds, each round running every one of them once, so that a
// configuration's rounds are spread over the scenario; then every other point of the
// throughput curve runs once. Within a round each configuration starts the rotation of names
// one contender later than the one before, and each round one later than the round before, so
// no contender always runs first, and a configuration's rounds start with different
// contenders.
func contendedSchedule(p plan, names []string) []contendedBlock {
	var table, curve []contendedConfig
	for _, hold := range p.holds {
		for _, g := range p.goroutines {
			table = append(table, contendedConfig{g, hold, p.contendedDur, true})
		}
	}
	for _, g := range p.curve {
		if !slices.Contains(p.goroutines, g) {
			curve = append(curve, contendedConfig{g, p.holds[0], p.curveDur, false})
		}
	}
	var blocks []contendedBlock
	k := 0
	for round := range p.contendedRounds {
		for ci, c := range table {
			k = ci + round
			blocks = append(blocks, contendedBlock{c, round, rotate(names, k)})
		}
	}
	for _, c := range curve {
		k++
		blocks = append(blocks, contendedBlock{c, 0, rotate(names, k)})
	}
	return blocks
}

// contended runs the schedule of contendedSchedule and pools each contender's runs of a
// configuration into one result.
func (b *bench) contended(ctx context.Context, rep *report) error {
	type id struct {
		name string
		g    int
		hold time.Duration
	}
	res := map[id]*contendedResult{}
	var order []*contendedResult
	for _, blk := range contendedSchedule(b.plan, contenders.Names) {
		c := blk.cfg
		for _, name := range blk.order {
			run, err := b.contendedRun(ctx, name, c.g, c.hold, c.dur)
			if err != nil {
				return err
			}
			r := res[id{name, c.g, c.hold}]
			if r == nil {
				r = &contendedResult{name: name, goroutines: c.g, hold: c.hold, table: c.table}
				res[id{name, c.g, c.hold}] = r
				order = append(order, r)
			}
			r.add(run)
			log.Printf("  round %d %-14s G=%-2d hold=%-5v %7.0f acq/s  gap p50 %-9v (n %d) max wait %-12v reacq %3.0f%% max share %.2fx pool %d warm-up %v probe late max %v",
				blk.round+1, name, c.g, c.hold, run.rate(), run.gaps.Quantile(0.5), run.gaps.Len(), run.maxWait(), 100*float64(run.reacquired)/float64(max(run.acquisitions-1, 1)),
				run.maxFairShare(), run.poolConns, run.warmUp.Round(time.Millisecond), run.late.Max())
		}
	}
	for _, r := range order {
		if len(r.runs) > 1 {
			log.Printf("  %-14s G=%-2d hold=%-5v %d rounds: median %s acq/s, max wait %v, busiest/fair %s",
				r.name, r.goroutines, r.hold, len(r.runs), r.rateSpread().count(0), r.maxWait(), r.fairSpread().ratio())
		}
	}
	rep.contended = append(rep.contended, order...)
	return nil
}

// contendedWarmUps is how many times each goroutine takes and frees the shared key in the
// contended phase of a contended run's warm-up.
const contendedWarmUps = 3

// contendedWarmUpWorkers caps the goroutines of that phase. A few waiters exercise every
// connection contention uses (the pool's were dialled by warmUp for all G), while every
// goroutine of a polling peer needs a poll interval (up to 250 ms) of its own to get the key:
// with all G, the phase would take seconds per run.
const contendedWarmUpWorkers = 4

// contendedWarmUp has workers goroutines, starting together, Acquire and Release key
// contendedWarmUps times each: the path a contended Acquire takes has run before timing (for
// lockguard, the pub/sub connection that wakes its waiters is dialled the first time one of
// them waits).
func contendedWarmUp(ctx context.Context, ct *contender, workers int, key string) error {
	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for range contendedWarmUps {
				lk, err := ct.Acquire(ctx, key)
				if err == nil {
					err = lk.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("%s contended warm-up: %w", ct.Name(), err)
	}
	return nil
}

// contendedRun warms up a fresh client of the named contender and times g goroutines taking
// and freeing one key, with the given hold, for dur.
func (b *bench) contendedRun(parent context.Context, name string, g int, hold, dur time.Duration) (*contendedRun, error) {
	ct := b.contender(name, contenders.Config{})
	defer ct.stop()
	key := fmt.Sprintf("bench:cont:%s:%d:%d:%d", name, g, hold.Microseconds(), time.Now().UnixNano())
	// Warm up the pool (g connections) and scripts on other keys, then the contended path on
	// one shared key.
	warm := time.Now()
	if _, err := warmUp(parent, ct, g, key+":warm:"); err != nil {
		return nil, err
	}
	if err := contendedWarmUp(parent, ct, min(g, contendedWarmUpWorkers), key+":warm"); err != nil {
		return nil, err
	}

	r := &contendedRun{goroutines: g, dur: dur, perG: make([]int, g), poolConns: int(ct.c.PoolStats().TotalConns), warmUp: time.Since(warm)}
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
