package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockguard/lockguard/bench/internal/contenders"
	"github.com/lockguard/lockguard/internal/redistest"
)

// The schedule runs every configuration of the tables in every round and each other point of
// the curve once, with every contender in every block, and rotates the order as the report
// says: no contender runs first in two blocks in a row, and a configuration's rounds start
// with different contenders.
func TestContendedSchedule(t *testing.T) {
	for _, quick := range []bool{false, true} {
		p := newPlan(quick)
		blocks := contendedSchedule(p, contenders.Names)
		type cfgKey struct {
			g    int
			hold time.Duration
		}
		firsts := map[cfgKey][]string{}
		for i, blk := range blocks {
			if got := slices.Sorted(slices.Values(blk.order)); !slices.Equal(got, slices.Sorted(slices.Values(contenders.Names))) {
				t.Errorf("quick=%v block %d runs %v, want every contender once", quick, i, blk.order)
			}
			if i > 0 && blocks[i-1].order[0] == blk.order[0] {
				t.Errorf("quick=%v blocks %d and %d both run %s first", quick, i-1, i, blk.order[0])
			}
			k := cfgKey{blk.cfg.g, blk.cfg.hold}
			if blk.round != len(firsts[k]) {
				t.Errorf("quick=%v block %d (G=%d, hold %v) is round %d, want %d", quick, i, k.g, k.hold, blk.round, len(firsts[k]))
			}
			firsts[k] = append(firsts[k], blk.order[0])
			wantDur := p.curveDur
			if blk.cfg.table {
				wantDur = p.contendedDur
			}
			if blk.cfg.dur != wantDur {
				t.Errorf("quick=%v block %d runs %v, want %v", quick, i, blk.cfg.dur, wantDur)
			}
		}
		for _, hold := range p.holds {
			for _, g := range p.goroutines {
				f := firsts[cfgKey{g, hold}]
				if len(f) != p.contendedRounds {
					t.Errorf("quick=%v G=%d hold %v runs %d rounds, want %d", quick, g, hold, len(f), p.contendedRounds)
				}
				if len(slices.Compact(slices.Sorted(slices.Values(f)))) != min(len(f), len(contenders.Names)) {
					t.Errorf("quick=%v G=%d hold %v: rounds start with %v, want different contenders", quick, g, hold, f)
				}
			}
		}
		for _, g := range p.curve {
			if slices.Contains(p.goroutines, g) {
				continue
			}
			if n := len(firsts[cfgKey{g, p.holds[0]}]); n != 1 {
				t.Errorf("quick=%v curve point G=%d runs %d times, want 1", quick, g, n)
			}
		}
		if want := len(p.holds)*len(p.goroutines)*p.contendedRounds + len(p.curve) - len(p.goroutines); len(blocks) != want {
			t.Errorf("quick=%v %d blocks, want %d", quick, len(blocks), want)
		}
	}
}

// TestContendedResultPools checks what a configuration reports over its rounds: the median
// and range of acquisitions/s and of busiest / fair, the worst max wait (unfinished waits
// included), and the re-acquired share and samples pooled.
func TestContendedResultPools(t *testing.T) {
	ms := time.Millisecond
	run := func(perG []int, reacq int, waits []time.Duration, pending time.Duration) *contendedRun {
		r := &contendedRun{goroutines: len(perG), dur: time.Second, perG: perG, reacquired: reacq, pendingMax: pending}
		for _, n := range perG {
			r.acquisitions += n
		}
		for _, w := range waits {
			r.waits.Add(w)
		}
		return r
	}
	c := &contendedResult{goroutines: 2}
	c.add(run([]int{50, 50}, 9, []time.Duration{1 * ms, 2 * ms}, 0))    // 100/s, fair 1.00x
	c.add(run([]int{150, 50}, 0, []time.Duration{3 * ms}, 7*ms))        // 200/s, fair 1.50x, unfinished 7 ms
	c.add(run([]int{100, 200}, 10, []time.Duration{5 * ms, 1 * ms}, 0)) // 300/s, fair 1.33x
	if s := c.rateSpread(); s.med != 200 || s.lo != 100 || s.hi != 300 || s.n != 3 || c.rate() != 200 {
		t.Errorf("rateSpread = %+v, rate %v, want median 200, range 100-300", s, c.rate())
	}
	if s := c.fairSpread(); s.med != 4.0/3 || s.lo != 1 || s.hi != 1.5 {
		t.Errorf("fairSpread = %+v, want median 1.33, range 1-1.5", s)
	}
	if got := c.maxWait(); got != 7*ms {
		t.Errorf("maxWait = %v, want the unfinished 7ms of round 2", got)
	}
	// 19 re-acquisitions of 99 + 199 + 299 that followed another acquisition in their round.
	if got, want := c.reacquiredShare(), 19.0/597; got != want {
		t.Errorf("reacquiredShare = %v, want %v", got, want)
	}
	if c.acquisitions != 600 || c.waits.Len() != 5 || c.dur != 3*time.Second {
		t.Errorf("pooled %d acquisitions, %d waits over %v, want 600, 5, 3s", c.acquisitions, c.waits.Len(), c.dur)
	}
	ref := &contendedResult{}
	ref.add(run([]int{100, 100}, 0, nil, 0))
	ref.add(run([]int{50, 50}, 0, nil, 0))
	if got := rateRatios(c, ref); !slices.Equal(got, []float64{0.5, 2}) {
		t.Errorf("rateRatios = %v, want [0.5 2]: round 1 with round 1, round 2 with round 2", got)
	}
}

// The scenario pools its runs into one result per contender and configuration: the
// configurations of the tables with contendedRounds runs, the other points of the curve with
// one.
func TestContendedRounds(t *testing.T) {
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := t.Context()
	p := newPlan(true)
	p.contendedDur, p.curveDur = 30*time.Millisecond, 30*time.Millisecond
	b, err := newBench(ctx, srv, p)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	rep := &report{plan: p}
	if err := b.contended(context.WithoutCancel(ctx), rep); err != nil {
		t.Fatal(err)
	}
	if want := (len(p.holds)*len(p.goroutines) + len(p.curve) - len(p.goroutines)) * len(contenders.Names); len(rep.contended) != want {
		t.Fatalf("%d results, want %d", len(rep.contended), want)
	}
	for _, c := range rep.contended {
		want := 1
		if c.table {
			want = p.contendedRounds
		}
		if len(c.runs) != want || c.table != slices.Contains(p.goroutines, c.goroutines) {
			t.Errorf("%s G=%d hold %v (table %v): %d runs, want %d", c.name, c.goroutines, c.hold, c.table, len(c.runs), want)
		}
		if c.acquisitions == 0 {
			t.Errorf("%s G=%d hold %v: no acquisitions", c.name, c.goroutines, c.hold)
		}
	}
}

// pubSubClients counts the server's client connections in pub/sub mode.
func pubSubClients(t *testing.T, b *bench) int {
	t.Helper()
	list, err := b.admin.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}

// The contended warm-up makes the contended path run before timing: after it, lockguard's
// Client has dialled the pub/sub connection that wakes its waiters, which the warm-up on keys
// of their own does not.
func TestContendedWarmUpDialsPubSub(t *testing.T) {
	srv, err := redistest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := t.Context()
	b, err := newBench(ctx, srv, newPlan(true))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	ct := b.contender(contenders.Lockguard, contenders.Config{})
	defer ct.stop()
	const g = 8
	if _, err := warmUp(ctx, ct, g, "test:warm:"); err != nil {
		t.Fatal(err)
	}
	if n := pubSubClients(t, b); n != 0 {
		t.Fatalf("%d pub/sub connections after the warm-up on keys of their own, want 0", n)
	}
	if err := contendedWarmUp(ctx, ct, min(g, contendedWarmUpWorkers), "test:warm"); err != nil {
		t.Fatal(err)
	}
	if n := pubSubClients(t, b); n != 1 {
		t.Fatalf("%d pub/sub connections after the contended warm-up, want 1", n)
	}
}

// The contended section names the goroutine counts of its tables and of the rest of the curve.
func TestContendedPlanNames(t *testing.T) {
	r := &report{plan: newPlan(false)}
	if got := r.tableGs(); got != "8 and 32" {
		t.Errorf("tableGs = %q, want \"8 and 32\"", got)
	}
	if got := strings.Join(r.curveOnly(), ", "); got != "1, 2, 4, 16" {
		t.Errorf("curveOnly = %q, want \"1, 2, 4, 16\"", got)
	}
	r.plan.goroutines = []int{4, 8, 32}
	if got := r.tableGs(); got != "4, 8 and 32" {
		t.Errorf("tableGs = %q, want \"4, 8 and 32\"", got)
	}
}
