package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/bench/internal/metrics"
)

// renewalResult is one round of one contender holding renewLocks locks for renewPeriods lease
// periods.
type renewalResult struct {
	name     string
	locks    int
	lease    time.Duration
	window   time.Duration // the measured hold, as it elapsed
	counts   metrics.Counts
	topLevel int64 // commandstats calls of the contender's top-level commands in the window
	lost     int64 // locks lost while held (a refresh or the release found them gone)
	errs     int64
	// started and refreshes count the refresh loops' Refresh calls that started and that
	// returned in the window, and refreshLat times the latter (contenders without a watchdog
	// only). A loop starts one per tick of its ticker, so fewer started than due means ticks
	// were dropped; completions differ from starts by the refreshes in flight at either end.
	started    int64
	refreshes  int64
	refreshLat metrics.Sample
	// poolWait is the time the client's requests spent waiting for a pooled connection in
	// the window (go-redis PoolStats.WaitDurationNs).
	poolWait time.Duration
}

// periods is the number of renewal periods (lease/3) in the window.
func (r *renewalResult) periods() float64 { return float64(r.window) / float64(r.lease/3) }

func (r *renewalResult) requestsPerPeriod() float64 { return float64(r.counts.Requests) / r.periods() }

func (r *renewalResult) roundTripsPerPeriod() float64 {
	return float64(r.counts.RoundTrips) / r.periods()
}

func (r *renewalResult) topLevelPerPeriod() float64 { return float64(r.topLevel) / r.periods() }

func (r *renewalResult) refreshesPerPeriod() float64 { return float64(r.refreshes) / r.periods() }

func (r *renewalResult) startedPerPeriod() float64 { return float64(r.started) / r.periods() }

// renewalRuns is every round of one contender.
type renewalRuns struct {
	name   string
	renews bool // renews by itself (watchdog): no refresh loops
	runs   []*renewalResult
}

// spreadOf returns the median and range of f over the rounds.
func (x *renewalRuns) spreadOf(f func(*renewalResult) float64) spread {
	var v []float64
	for _, r := range x.runs {
		v = append(v, f(r))
	}
	return spreadOf(v)
}

func (x *renewalRuns) lost() (n int64) {
	for _, r := range x.runs {
		n += r.lost
	}
	return n
}

func (x *renewalRuns) errs() (n int64) {
	for _, r := range x.runs {
		n += r.errs
	}
	return n
}

// refreshLat merges the Refresh timings of every round.
// poolWaitPerRequest is the mean time a request waited for a pooled connection, over all
// rounds.
func (x *renewalRuns) poolWaitPerRequest() time.Duration {
	var w time.Duration
	var n int64
	for _, r := range x.runs {
		w += r.poolWait
		n += r.counts.Requests
	}
	if n == 0 {
		return 0
	}
	return w / time.Duration(n)
}

func (x *renewalRuns) refreshLat() *metrics.Sample {
	var s metrics.Sample
	for _, r := range x.runs {
		s.Merge(&r.refreshLat)
	}
	return &s
}

// renewal holds many locks with a short lease and counts what keeps them alive: lockguard's
// watchdog, or for the others one refresh loop per lock, refreshing every lease/3 (their
// READMEs show Refresh / Extend, not when to call it: lease/3 is lockguard's own watchdog
// period, so both renew as often). Each contender runs
// renewRounds times, on a fresh client each time, in an order that rotates from round to round.
func (b *bench) renewal(ctx context.Context, rep *report) error {
	res := map[string]*renewalRuns{}
	for _, name := range contenders.Names {
		res[name] = &renewalRuns{name: name}
	}
	for round := range b.plan.renewRounds {
		for _, name := range rotate(contenders.Names, round+2) {
			r, renews, err := b.renewalRun(ctx, name, round)
			if err != nil {
				return err
			}
			log.Printf("  round %d %-14s %8.1f requests/period %8.1f round trips/period, refreshes/period %.1f started %.1f completed (Refresh p50 %v p99 %v), lost %d, errors %d",
				round+1, name, r.requestsPerPeriod(), r.roundTripsPerPeriod(), r.startedPerPeriod(), r.refreshesPerPeriod(),
				r.refreshLat.Quantile(0.5), r.refreshLat.Quantile(0.99), r.lost, r.errs)
			res[name].runs = append(res[name].runs, r)
			res[name].renews = renews
		}
	}
	for _, name := range contenders.Names {
		rep.renewal = append(rep.renewal, res[name])
	}
	return nil
}

// renewalRun runs one round of one contender; renews reports whether it renews by itself.
func (b *bench) renewalRun(parent context.Context, name string, round int) (r *renewalResult, renews bool, err error) {
	lease := b.plan.renewLease
	ct := b.contender(name, contenders.Config{Lease: lease})
	defer ct.stop()
	r = &renewalResult{name: name, locks: b.plan.renewLocks, lease: lease}
	var errs, started, refreshes atomic.Int64
	var measuring atomic.Bool            // inside the window: count and time the refreshes that return
	lost := make([]atomic.Bool, r.locks) // a lock counts once, whether a refresh or the release saw it gone

	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	held := make([]contenders.Held, r.locks)
	var refreshers sync.WaitGroup
	refresh := func(i int, h contenders.Held) {
		t := time.NewTicker(lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			t0 := time.Now()
			if measuring.Load() {
				started.Add(1)
			}
			err := h.Refresh(ctx)
			if measuring.Load() {
				refreshes.Add(1)
				r.refreshLat.Add(time.Since(t0))
			}
			if err != nil {
				if errors.Is(err, contenders.ErrLost) {
					lost[i].Store(true)
					return
				}
				if ctx.Err() == nil {
					errs.Add(1)
				}
			}
		}
	}
	// Acquire with 64 workers; a refresh loop starts as soon as its lock is held.
	if err := parallel(parent, 64, r.locks, func(i int) error {
		// A busy machine can make a single call fail (redsync gives each try 5% of the expiry,
		// 75 ms here): count it and try again, a few times.
		var h contenders.Held
		var err error
		for range 5 {
			if h, err = ct.Acquire(parent, fmt.Sprintf("bench:renew:%s:%d:%d", name, round, i)); err == nil {
				break
			}
			errs.Add(1)
		}
		if err != nil {
			return err
		}
		held[i] = h
		if !ct.Renews() {
			refreshers.Go(func() { refresh(i, h) })
		}
		return nil
	}); err != nil {
		cancel()
		refreshers.Wait()
		return nil, false, fmt.Errorf("%s acquire: %w", name, err)
	}

	// Open the window a lease and half a renewal period after the last lock was acquired. By
	// then every lock's renewal cycle has run three times and the load of the acquisitions is
	// gone; the window lasts a whole number of renewal periods, so both of its ends fall at the
	// same point of the cycle, half a period away from the ticks of the locks acquired last, so
	// that about the same refreshes are in flight at either end. (Requests are counted when they
	// complete: opened at once, the window would find none in flight at its start and the wave
	// of the first-acquired locks at its end.)
	select {
	case <-time.After(lease + lease/6):
	case <-parent.Done():
	}
	cs0 := b.commandStats(parent)
	c0 := ct.c.rt.Snapshot()
	w0 := ct.c.PoolStats().WaitDurationNs
	start := time.Now()
	measuring.Store(true)
	select {
	case <-time.After(time.Duration(b.plan.renewPeriods) * lease):
	case <-parent.Done():
	}
	measuring.Store(false)
	r.counts = ct.c.rt.Snapshot().Sub(c0)
	r.window = time.Since(start)
	r.poolWait = time.Duration(ct.c.PoolStats().WaitDurationNs - w0)
	r.topLevel = b.commandStats(parent).Sub(cs0).Sum(ct.TopLevel()...)
	r.refreshes, r.started = refreshes.Load(), started.Load()
	cancel()
	refreshers.Wait()

	if ct.Renews() {
		for i, h := range held {
			if h.Refresh(parent) != nil { // sends nothing for lockguard: reports a lost lease
				lost[i].Store(true)
			}
		}
	}
	_ = parallel(parent, 64, r.locks, func(i int) error {
		if err := held[i].Release(parent); errors.Is(err, contenders.ErrLost) {
			lost[i].Store(true)
		} else if err != nil {
			errs.Add(1)
		}
		return nil
	})
	for i := range lost {
		if lost[i].Load() {
			r.lost++
		}
	}
	r.errs = errs.Load()
	return r, ct.Renews(), parent.Err()
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
