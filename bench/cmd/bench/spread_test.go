package main

import (
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		s := spreadOf(tc.in)
		if s.med != tc.med || s.lo != tc.lo || s.hi != tc.hi || s.n != len(tc.in) {
			t.Errorf("spreadOf(%v) = %+v, want median %v, range %v-%v", tc.in, s, tc.med, tc.lo, tc.hi)
		}
	}
}

// TestRoundRatios checks that ratios pair a contender's rounds with the floor's same rounds.
func TestRoundRatios(t *testing.T) {
	us := time.Microsecond
	floor := &uncontendedResult{rounds: []time.Duration{100 * us, 200 * us, 100 * us}}
	c := &uncontendedResult{rounds: []time.Duration{110 * us, 200 * us, 150 * us}}
	s := c.ratioSpread(floor)
	if s.med != 1.1 || s.lo != 1 || s.hi != 1.5 || s.n != 3 {
		t.Errorf("ratioSpread = %+v, want median 1.1, range 1-1.5", s)
	}
}

func TestLoadHigh(t *testing.T) {
	for _, tc := range []struct {
		load  string
		cores int
		want  bool
	}{
		{"2.02 1.36 1.14", 2, true},
		{"1.50 1.36 1.14", 2, false},
		{"1.50 1.36 1.14", 1, true},
		{"unknown", 2, false},
	} {
		if got := loadHigh(tc.load, tc.cores); got != tc.want {
			t.Errorf("loadHigh(%q, %d) = %v, want %v", tc.load, tc.cores, got, tc.want)
		}
	}
}

// TestClientSplit checks the split of the uncontended gap that server time leaves: lockguard's
// own client work (its client time p50 over the floor's, at most the rest) and the remainder.
func TestClientSplit(t *testing.T) {
	us := time.Microsecond
	withClient := func(d time.Duration) *uncontendedResult {
		r := &uncontendedResult{}
		for range 3 {
			r.client.Add(d)
		}
		return r
	}
	floor := withClient(2 * us)
	for _, tc := range []struct {
		lg   time.Duration
		rest float64
		want []string
	}{
		{17 * us, 45, []string{"Of the other 45 µs, about 15 µs is lockguard's own client work: 17.0 µs", "against 2.0 µs for the pair", "the remaining 30 µs"}},
		{60 * us, 45, []string{"lockguard's own client work accounts for the other 45 µs: 60.0 µs"}},
		{1 * us, 45, []string{"The other 45 µs is spent inside the go-redis calls", "1.0 µs per operation at p50, the pair's 2.0 µs"}},
	} {
		got := clientSplit(withClient(tc.lg), floor, tc.rest)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("clientSplit(client %v, rest %v) = %q, want it to contain %q", tc.lg, tc.rest, got, w)
			}
		}
	}
}

// TestCPUNote checks how whole-process CPU time is set against the uncontended latency gap.
func TestCPUNote(t *testing.T) {
	us := time.Microsecond
	withCPU := func(server, process time.Duration) *uncontendedResult {
		return &uncontendedResult{ops: 10, serverCPU: 10 * server, processCPU: 10 * process}
	}
	floor := withCPU(60*us, 100*us)
	for _, tc := range []struct {
		lg   *uncontendedResult
		gap  float64
		want []string
	}{
		{withCPU(90*us, 110*us), 40, []string{"Redis 90.0 µs against 60.0 µs for the pair (+30.0 µs)", "this process 110.0 µs against 100.0 µs (+10.0 µs)", "+40 µs of CPU in all, against the median gap of 40 µs", "consistent with CPU work on the operation's path, most of it in Redis"}},
		{withCPU(70*us, 130*us), 40, []string{"+40 µs of CPU in all", "most of it in this process"}},
		{withCPU(90*us, 150*us), 40, []string{"+80 µs of CPU in all", "more than the gap"}},
		{withCPU(70*us, 100*us), 40, []string{"+10 µs of CPU in all", "the rest of the gap is time neither process spent on the CPU"}},
		{withCPU(0, 0), 40, nil},
	} {
		got := cpuNote(tc.lg, floor, tc.gap)
		if tc.want == nil && got != "" {
			t.Errorf("cpuNote without CPU times = %q, want \"\"", got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("cpuNote(%+v, gap %v) = %q, want it to contain %q", tc.lg, tc.gap, got, w)
			}
		}
	}
}
