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

// renewalResult is one contender holding renewLocks locks for renewPeriods lease periods.
type renewalResult struct {
	name     string
	locks    int
	lease    time.Duration
	window   time.Duration // the measured hold
	counts   metrics.Counts
	topLevel int64 // commandstats calls of the contender's top-level commands in the window
	lost     int64 // locks lost while held (a refresh or the release found them gone)
	errs     int64
}

// periods is the number of renewal periods (lease/3) in the window.
func (r *renewalResult) periods() float64 { return float64(r.window) / float64(r.lease/3) }

func (r *renewalResult) requestsPerPeriod() float64 { return float64(r.counts.Requests) / r.periods() }

func (r *renewalResult) roundTripsPerPeriod() float64 {
	return float64(r.counts.RoundTrips) / r.periods()
}

// renewal holds many locks with a short lease and counts what keeps them alive: lockguard's
// watchdog, or for the others one refresh loop per lock, refreshing every lease/3 (the
// pattern their READMEs show: Refresh / Extend before the ttl runs out).
func (b *bench) renewal(ctx context.Context, rep *report) error {
	for _, name := range rotate(contenders.Names, 2) {
		r, err := b.renewalRun(ctx, name)
		if err != nil {
			return err
		}
		log.Printf("  %-14s %8.1f requests/period %8.1f round trips/period, lost %d, errors %d",
			name, r.requestsPerPeriod(), r.roundTripsPerPeriod(), r.lost, r.errs)
		rep.renewal = append(rep.renewal, r)
	}
	return nil
}

func (b *bench) renewalRun(parent context.Context, name string) (*renewalResult, error) {
	lease := b.plan.renewLease
	ct := b.contender(name, contenders.Config{Lease: lease})
	defer ct.stop()
	r := &renewalResult{name: name, locks: b.plan.renewLocks, lease: lease}
	var errs atomic.Int64
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
			if err := h.Refresh(ctx); err != nil {
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
			if h, err = ct.Acquire(parent, fmt.Sprintf("bench:renew:%s:%d", name, i)); err == nil {
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
		return nil, fmt.Errorf("%s acquire: %w", name, err)
	}

	r.window = time.Duration(b.plan.renewPeriods) * lease
	cs0 := b.commandStats(parent)
	c0 := ct.c.rt.Snapshot()
	select {
	case <-time.After(r.window):
	case <-parent.Done():
	}
	r.counts = ct.c.rt.Snapshot().Sub(c0)
	r.topLevel = b.commandStats(parent).Sub(cs0).Sum(ct.TopLevel()...)
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
	return r, parent.Err()
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
